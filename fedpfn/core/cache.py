"""What a process keeps between clients: data, partitions and model skeletons.

Ray reuses one worker for many clients and rounds; loading the dataset or partitioning
it again per client would dominate a round. Only immutable things are cached here:
per-client state lives in Flower's `context.state`.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING

import numpy as np
import torch
from torch import nn

from fedpfn.core.data import DatasetSplits, load_dataset
from fedpfn.core.groups import PARTITION, Start, Tasks
from fedpfn.core.init_file import load_start
from fedpfn.core.models import build_model
from fedpfn.core.seeding import Stream, numpy_rng, seed_for
from partitions import label_counts, partition_labels, task_labels

if TYPE_CHECKING:
    from fedpfn.core.config import RunConfig


def dataset_for(cfg: RunConfig) -> DatasetSplits:
    return load_dataset(cfg.task.dataset, cfg.task.data_root, cfg.task.download)


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
    return _data_on(cfg.task.dataset, cfg.task.data_root, cfg.task.download, str(device))


@dataclass(frozen=True)
class SplitKey:
    """Everything a run's split of the training set depends on (a cache key)."""

    dataset: str
    data_root: str | None
    download: bool
    num_clients: int
    method: str
    alpha: float
    shards_per_client: int
    min_size: int
    validation_fraction: float
    run_seed: int
    partition_args: str = ""  # a flwr-datasets partitioner's (partitions/flwr.py)

    @classmethod
    def of(cls, cfg: RunConfig) -> SplitKey:
        split = PARTITION.flat(cfg.partition)  # a setting the partition lacks at its default, as before the variants
        task = cfg.task
        return cls(
            task.dataset, task.data_root, task.download, cfg.federation.num_clients, split["partition"], split["alpha"],
            split["shards_per_client"], split["min_partition_size"], cfg.evaluation.validation_fraction, cfg.seed,
            split["partition_args"],
        )


@lru_cache(maxsize=4)
def _split(key: SplitKey) -> tuple[torch.Tensor, tuple[torch.Tensor, ...]]:
    """(held-out validation indices, each client's indices), all into the training set.

    The validation samples are drawn first (seeded), the clients share the rest.
    """
    labels = load_dataset(key.dataset, key.data_root, key.download).train_y.numpy()
    order = numpy_rng(key.run_seed, Stream.HOLDOUT).permutation(len(labels))
    held = round(key.validation_fraction * len(labels))
    validation, pool = np.sort(order[:held]), np.sort(order[held:])
    parts = partition_labels(
        labels[pool],
        key.num_clients,
        key.method,
        alpha=key.alpha,
        shards_per_client=key.shards_per_client,
        min_size=key.min_size,
        seed=seed_for(key.run_seed, Stream.PARTITION),
        flwr_args=key.partition_args,
    )
    return torch.from_numpy(validation), tuple(torch.from_numpy(pool[p]) for p in parts)


def client_indices(cfg: RunConfig) -> tuple[torch.Tensor, ...]:
    """Training-set indices of every client; the same on every process for one config."""
    return _split(SplitKey.of(cfg))[1]


def validation_indices(cfg: RunConfig) -> torch.Tensor:
    """Training-set indices held out for validation (empty unless validation_fraction > 0)."""
    return _split(SplitKey.of(cfg))[0]


def local_split(cfg: RunConfig, partition_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(training, local test) indices of one client: a seeded `local_test_fraction` of its partition.

    The local test split is what personalised FL figures evaluate on: the client's own label
    mix, never trained on. At least one sample each side once the fraction is above 0. Drawn
    per call (a permutation of one partition: microseconds), so nothing per client is cached.
    """
    indices = client_indices(cfg)[partition_id]
    train, local_test = local_positions(cfg, partition_id, len(indices))
    return indices[train], indices[local_test]


def local_positions(cfg: RunConfig, partition_id: int, size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """`local_split` as positions within a partition of `size` samples, in the partition's order.

    A node that holds only its partition (fedpfn.runtime.nodedata) draws its split from this, the
    same function as the simulation, so the two cannot disagree.
    """
    if cfg.evaluation.local_test_fraction == 0:
        return torch.arange(size), torch.arange(0)
    held = min(max(round(cfg.evaluation.local_test_fraction * size), 1), size - 1)
    order = numpy_rng(cfg.seed, Stream.LOCAL_SPLIT, partition_id).permutation(size)
    return torch.from_numpy(np.sort(order[held:])), torch.from_numpy(np.sort(order[:held]))


def partition_label_counts(cfg: RunConfig):
    data = dataset_for(cfg)
    parts = [p.numpy() for p in client_indices(cfg)]
    return label_counts(data.train_y.numpy(), parts, data.num_classes)


def initial_model(cfg: RunConfig) -> nn.Module:
    """The global model before round 1: seeded, then loaded from the start file where given (its
    classifier left to the seed with `fresh_head`: the header says which).

    A start file that cannot be used raises InitError (a ConfigError, one line per problem).
    """
    data = dataset_for(cfg)
    with torch.random.fork_rng(devices=[]):  # seeded here, without touching the caller's RNG
        torch.manual_seed(seed_for(cfg.seed, Stream.INIT))
        model = build_model(cfg.task.model, data.input_shape, data.num_classes, cfg.task.projection_head)
    if isinstance(start := cfg.start, Start):
        load_start(model, start.init, fresh_head=start.fresh_head)
    return model


@lru_cache(maxsize=8)
def _skeleton(model: str, input_shape: tuple[int, int, int], num_classes: int, head: int, device: str) -> nn.Module:
    return build_model(model, input_shape, num_classes, head).to(device)


def model_skeleton(cfg: RunConfig, device: torch.device, data: ClientData | None = None) -> nn.Module:
    """A reusable model of the run's architecture; callers load the weights they need.

    With a client's `data`, its shapes are used: a node holding only its partition never
    loads the dataset.
    """
    shapes = data if data is not None else dataset_for(cfg)
    return _skeleton(cfg.task.model, shapes.input_shape, shapes.num_classes, cfg.task.projection_head, str(device))


@dataclass(frozen=True, eq=False)
class ClientData:
    """What one client trains and tests on: rows `train` and `local_test` of `x`, `y`.

    In simulation `x`, `y` are the whole training set (shared by every client of a process);
    on a node with its own copy they are its partition alone (fedpfn.runtime.nodedata).
    """

    x: torch.Tensor
    y: torch.Tensor
    train: torch.Tensor
    local_test: torch.Tensor
    input_shape: tuple[int, int, int]
    num_classes: int


def client_data(cfg: RunConfig, partition_id: int, device: torch.device) -> ClientData:
    """A client's data taken from the whole dataset, placed once per process on `device`."""
    data = dataset_on(cfg, device)
    train, local_test = local_split(cfg, partition_id)
    return ClientData(data.train_x, train_labels(cfg, device), train, local_test, data.input_shape, data.num_classes)


def train_labels(cfg: RunConfig, device: torch.device) -> torch.Tensor:
    """The labels clients train on: the dataset's, or each client's relabelled in its task (`tasks`)."""
    if isinstance(cfg.partition, Tasks):
        return _task_labels_on(SplitKey.of(cfg), str(device))
    return dataset_on(cfg, device).train_y


@lru_cache(maxsize=4)
def _task_labels_on(key: SplitKey, device: str) -> torch.Tensor:
    """The training labels with each client's images relabelled in its task (partitions.tasks)."""
    data = _data_on(key.dataset, key.data_root, key.download, device)
    parts = [part.numpy() for part in _split(key)[1]]
    return torch.from_numpy(task_labels(data.train_y.cpu().numpy(), parts)).to(device)
