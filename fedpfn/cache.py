"""What a process keeps between clients: data, partitions and model skeletons.

Ray reuses one worker for many clients and rounds; loading the dataset or partitioning
it again per client would dominate a round. Only immutable things are cached here:
per-client state lives in Flower's `context.state`.
"""

from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING

import numpy as np
import torch
from torch import nn

from fedpfn.data import DatasetSplits, load_dataset
from fedpfn.models import build_model
from fedpfn.seeding import Stream, numpy_rng, seed_for
from partitions import label_counts, partition_labels

if TYPE_CHECKING:
    from fedpfn.config import RunConfig


def dataset_for(cfg: RunConfig) -> DatasetSplits:
    return load_dataset(cfg.dataset, cfg.data_root, cfg.download)


@lru_cache(maxsize=4)
def _data_on(name: str, data_root: str | None, download: bool, device: str) -> DatasetSplits:
    data = load_dataset(name, data_root, download)
    if device == "cpu":
        return data
    move = lambda t: t.to(device)  # noqa: E731
    return DatasetSplits(
        name=data.name,
        train_x=move(data.train_x),
        train_y=move(data.train_y),
        test_x=move(data.test_x),
        test_y=move(data.test_y),
        num_classes=data.num_classes,
    )


def dataset_on(cfg: RunConfig, device: torch.device) -> DatasetSplits:
    """The dataset placed once per process on `device` (the GPU keeps it between clients)."""
    return _data_on(cfg.dataset, cfg.data_root, cfg.download, str(device))


@lru_cache(maxsize=4)
def _partitions(
    dataset: str,
    data_root: str | None,
    download: bool,
    num_clients: int,
    method: str,
    alpha: float,
    shards_per_client: int,
    min_size: int,
    seed: int,
) -> tuple[torch.Tensor, ...]:
    labels = load_dataset(dataset, data_root, download).train_y.numpy()
    parts = partition_labels(
        labels,
        num_clients,
        method,
        alpha=alpha,
        shards_per_client=shards_per_client,
        min_size=min_size,
        seed=seed,
    )
    return tuple(torch.from_numpy(p) for p in parts)


def client_indices(cfg: RunConfig) -> tuple[torch.Tensor, ...]:
    """Training-set indices of every client; the same on every process for one config."""
    return _partitions(
        cfg.dataset,
        cfg.data_root,
        cfg.download,
        cfg.num_clients,
        cfg.partition,
        cfg.alpha,
        cfg.shards_per_client,
        cfg.min_partition_size,
        seed_for(cfg.seed, Stream.PARTITION),
    )


def local_split(cfg: RunConfig, partition_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(training, local test) indices of one client: a seeded `local_test_fraction` of its partition.

    The local test split is what personalised FL figures evaluate on: the client's own label
    mix, never trained on. At least one sample each side once the fraction is above 0. Drawn
    per call (a permutation of one partition: microseconds), so nothing per client is cached.
    """
    indices = client_indices(cfg)[partition_id]
    if cfg.local_test_fraction == 0:
        return indices, indices[:0]
    held = min(max(round(cfg.local_test_fraction * len(indices)), 1), len(indices) - 1)
    order = numpy_rng(cfg.seed, Stream.LOCAL_SPLIT, partition_id).permutation(len(indices))
    return indices[np.sort(order[held:])], indices[np.sort(order[:held])]


def partition_label_counts(cfg: RunConfig):
    data = dataset_for(cfg)
    parts = [p.numpy() for p in client_indices(cfg)]
    return label_counts(data.train_y.numpy(), parts, data.num_classes)


def initial_model(cfg: RunConfig) -> nn.Module:
    """The global model before round 1, a function of the seed only."""
    data = dataset_for(cfg)
    with torch.random.fork_rng(devices=[]):  # seeded here, without touching the caller's RNG
        torch.manual_seed(seed_for(cfg.seed, Stream.INIT))
        return build_model(cfg.model, data.input_shape, data.num_classes)


@lru_cache(maxsize=8)
def _skeleton(model: str, input_shape: tuple[int, int, int], num_classes: int, device: str) -> nn.Module:
    return build_model(model, input_shape, num_classes).to(device)


def model_skeleton(cfg: RunConfig, device: torch.device) -> nn.Module:
    """A reusable model of the run's architecture; callers load the weights they need."""
    data = dataset_for(cfg)
    return _skeleton(cfg.model, data.input_shape, data.num_classes, str(device))
