"""An offline pretrained start: train a model on an upstream part of a dataset, save its weights.

    python -m fedpfn.experiments.pretrain --model vit_tiny28 --dataset fmnist --out DIR

The upstream part is a seeded share of the training set (`--upstream-fraction`, half by
default) restricted to `--upstream-classes` (Fashion-MNIST's T-shirt, Trouser, Pullover,
Dress and Coat by default); the rest of the training set, every class, is left to downstream
tasks (`python -m fedpfn.experiments.soup` reads which from pretrain.json). A seeded part of the
upstream samples is held out and the model's accuracy on it is saved. Writes
DIR/model.safetensors (a state dict that `--init` and `--start` read) and DIR/pretrain.json
(the settings, the split's sizes, held-out accuracy). Nothing is downloaded.
"""

from __future__ import annotations

import hashlib
import json
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import torch

from fedpfn.core.data import CLASS_NAMES, DataChoice, DataError, load_dataset
from fedpfn.core.files import DamagedFile, read_json
from fedpfn.core.models import ModelChoice, build_model
from fedpfn.core.seeding import MAX_SEED, Draw, Stream, seed_for, torch_generator
from fedpfn.core.settings import above, at_least, between, each, one_of, setting
from fedpfn.core.training import OPTIMIZERS, OptimizerSpec, evaluate, minibatches, pick_device, train_local
from fedpfn.experiments.command import (
    MachineChoice,
    build_parser,
    fail,
    machine_problems,
    read_command_line,
    read_settings,
    recorded,
    write_files,
)

MODEL_FILE, RECORD_FILE = "model.safetensors", "pretrain.json"
MAX_RECORD_BYTES = 1 << 20  # pretrain.json is a page of settings and figures
OUTPUT_FILES = (MODEL_FILE, RECORD_FILE)


def _distinct_classes(classes: tuple[int, ...]) -> str | None:
    reason = each(at_least(0))(classes)
    if reason is None and len(set(classes)) != len(classes):
        reason = f"{','.join(map(str, classes))} repeats a class"
    return reason


@dataclass(frozen=True)
class PretrainConfig(DataChoice, ModelChoice, MachineChoice):
    """Every setting of one pretraining; saved as the `config` of pretrain.json. The model and the dataset
    are the shared groups' settings, listed first as ever (command.listed)."""

    BEFORE: ClassVar[dict[str, str]] = {
        "model": "upstream_classes", "dataset": "upstream_classes", "data_root": "threads", "device": "threads"
    }  # fmt: skip

    upstream_classes: tuple[int, ...] = setting(
        (0, 1, 2, 3, 4),
        "classes the upstream part holds (labels as the dataset numbers them)",
        _distinct_classes,
    )
    upstream_fraction: float = setting(
        0.5, "seeded share of the training set upstream draws from; the rest is downstream's",
        between(0, 1, low_open=True, high_open=True),
    )  # fmt: skip
    held_out: float = setting(
        0.1, "fraction of the upstream part held out for accuracy", between(0, 0.5, low_open=True)
    )
    epochs: int = setting(3, "training epochs", at_least(1))
    optimizer: str = setting("adam", "sgd or adam", one_of(OPTIMIZERS))
    lr: float = setting(1e-3, "learning rate", above(0))
    momentum: float = setting(0.9, "SGD momentum, in [0, 1) (sgd only)", between(0, 1, high_open=True))
    weight_decay: float = setting(0.0, "weight decay (L2, added to the gradient)", at_least(0))
    batch_size: int = setting(128, "training batch size", at_least(1))
    seed: int = setting(0, f"seed of the split, the initialisation and the batch order, in [0, {MAX_SEED}]",
                        between(0, MAX_SEED))  # fmt: skip
    threads: int = setting(0, "torch CPU threads, 0 for torch's choice", at_least(0))


def relation_problems(cfg: PretrainConfig, given: set[str]) -> list[str]:
    """What no single setting shows: classes the dataset lacks, a setting given but unused, a
    missing GPU, missing files."""
    found = []
    names = CLASS_NAMES.get(cfg.dataset)
    if names and any(c >= len(names) for c in cfg.upstream_classes):
        found.append(f"upstream_classes: {cfg.dataset} has classes 0 to {len(names) - 1}")
    if cfg.optimizer != "sgd" and "momentum" in given:
        found.append("momentum: only --optimizer sgd uses it; drop it")
    return found + machine_problems(cfg.dataset, cfg.data_root, cfg.device)


@dataclass(frozen=True)
class Split:
    """Training-set indices: upstream (trained on and held out) and downstream (left to others)."""

    upstream: torch.Tensor
    held_out: torch.Tensor
    downstream: torch.Tensor


def split_training_set(labels: torch.Tensor, cfg: PretrainConfig) -> Split:
    """The seeded upstream share cut to the upstream classes, its held-out part, and the rest.

    Downstream keeps every training sample outside the upstream share, whatever its class, so
    a downstream task never trains on a sample the start has seen.
    """
    order = torch.randperm(
        len(labels), generator=torch_generator(cfg.seed, Stream.ANALYSIS, Draw.PRETRAIN_UPSTREAM_SHARE)
    )
    cut = round(cfg.upstream_fraction * len(labels))
    share, downstream = order[:cut], order[cut:]
    upstream = share[torch.isin(labels[share], torch.tensor(cfg.upstream_classes))]
    mixed = upstream[
        torch.randperm(
            len(upstream), generator=torch_generator(cfg.seed, Stream.ANALYSIS, Draw.PRETRAIN_UPSTREAM_HELD_OUT)
        )
    ]
    held = round(cfg.held_out * len(mixed))
    return Split(mixed[held:].sort().values, mixed[:held].sort().values, downstream.sort().values)


def epochs_logged(
    indices: torch.Tensor,
    batch_size: int,
    epochs: int,
    generator: torch.Generator,
    log: Callable[[str], None],
) -> Iterator[torch.Tensor]:
    """`minibatches(indices, batch_size, epochs, generator)`, saying when each epoch starts."""
    started = time.perf_counter()
    for epoch in range(epochs):
        log(f"epoch {epoch + 1}/{epochs} ({time.perf_counter() - started:.0f} s)")
        yield from minibatches(indices, batch_size, 1, generator)


def pretrain(
    cfg: PretrainConfig, log: Callable[[str], None] = print
) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """Train on the upstream part; (the state dict, the record pretrain.json holds)."""
    started = time.perf_counter()
    device = pick_device(cfg.device != "cpu")
    data = load_dataset(cfg.dataset, cfg.data_root)
    if any(c >= data.num_classes for c in cfg.upstream_classes):
        raise ValueError(f"upstream_classes: {cfg.dataset} has classes 0 to {data.num_classes - 1}")
    split = split_training_set(data.train_y, cfg)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed_for(cfg.seed, Stream.INIT))
        model = build_model(cfg.model, data.input_shape, data.num_classes).to(device)
    x, y = data.train_x.to(device), data.train_y.to(device)
    spec = OptimizerSpec(cfg.optimizer, cfg.lr, momentum=cfg.momentum if cfg.optimizer == "sgd" else 0.0,
                         weight_decay=cfg.weight_decay)  # fmt: skip
    gen = torch_generator(cfg.seed, Stream.DATA_ORDER, 0, 0)
    trained = train_local(
        model, x, y, epochs_logged(split.upstream, cfg.batch_size, cfg.epochs, gen, log), spec
    )
    held_loss, held_acc = evaluate(model, x[split.held_out.to(device)], y[split.held_out.to(device)])
    state = {name: t.detach().cpu().contiguous() for name, t in model.state_dict().items()}
    names = CLASS_NAMES.get(cfg.dataset)
    record = {
        "config": recorded(cfg),
        "upstream_class_names": [names[c] for c in cfg.upstream_classes] if names else None,
        "sizes": {
            "upstream_train": len(split.upstream),
            "upstream_held_out": len(split.held_out),
            "downstream": len(split.downstream),
        },
        "parameters": sum(t.numel() for t in model.parameters()),
        "train": {"loss": trained.loss, "accuracy": trained.accuracy, "steps": trained.steps},
        "held_out": {"loss": held_loss, "accuracy": held_acc},
        "device": str(device),
        "seconds": time.perf_counter() - started,
    }
    return state, record


def read_record(start: Path) -> tuple[PretrainConfig | None, list[str]]:
    """The settings of the pretraining that wrote `start`, from pretrain.json beside it (None if absent).

    The record came with the file, from whoever made it: read through the checked reader (a regular
    file of at most MAX_RECORD_BYTES, never through a link, nesting bounded)."""
    path = start.expanduser().parent / RECORD_FILE
    if not path.exists() and not path.is_symlink():
        return None, []
    try:
        record = read_json(path, MAX_RECORD_BYTES)
    except (OSError, DamagedFile) as err:
        return None, [f"start: {err} (the pretrain record beside the start)"]
    config = record.get("config") if isinstance(record, dict) else None
    if not isinstance(config, dict):
        return None, [f"start: {path} is not a pretrain record (no config object)"]
    cfg, found = read_settings(PretrainConfig, config)
    return cfg, [f"start: {path}: {line}" for line in found]


def main(argv: list[str] | None = None, prog: str = "python -m fedpfn.experiments.pretrain") -> int:
    parser = build_parser(prog, __doc__, PretrainConfig, " and ".join(OUTPUT_FILES))
    cfg, out, given, found = read_command_line(parser, PretrainConfig, OUTPUT_FILES, argv)
    found += relation_problems(cfg, given)
    if found:
        return fail(found)
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    try:
        state, record = pretrain(cfg, log=lambda line: print(line, flush=True))
    except (DataError, ValueError) as err:
        return fail(str(err).splitlines())
    from safetensors.torch import save

    weights = save(state, metadata={"fedpfn": "pretrain", "model": cfg.model, "dataset": cfg.dataset})
    record["sha256"] = hashlib.sha256(weights).hexdigest()
    write_files(out, {MODEL_FILE: weights, RECORD_FILE: (json.dumps(record, indent=1) + "\n").encode()})
    held = record["held_out"]
    print(f"held-out accuracy {100 * held['accuracy']:.2f} % (loss {held['loss']:.3f}) on "
          f"{record['sizes']['upstream_held_out']} upstream samples; wrote {out / MODEL_FILE} in {record['seconds']:.0f} s")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
