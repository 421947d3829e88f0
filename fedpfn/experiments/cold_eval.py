"""ColD fusion's evaluation (Don-Yehiya et al. 2023) of one fused body: the computation behind
`python -m fedpfn.experiments.cold`.

- own tasks: the run's final global body with contributor k's own head (its client state,
  record `personal`), on the test images of k's task, relabelled in it; the figure is the mean
  over contributors;
- held-out tasks (partitions.tasks.HELD_OUT_TASKS, which no contributor trains on): a fresh
  head drawn from the seed, fitted for a short while on the task's samples of the run's
  validation share (the training images no contributor saw), then measured on the task's test
  images. Linear probe: the body fixed bit for bit (every body entry an anchor of the one local
  step, its buffers put back); full: the whole model trains.

The start itself (the pretrained file, no fusion) is evaluated the same way on held-out tasks.
Every draw is keyed by the seed, so each arm of a seed meets the same samples, heads and order:

    ANALYSIS (Draw.COLD_HEAD, t)    the fresh head of held-out task t
    ANALYSIS (Draw.COLD_SAMPLES, t) which validation samples task t's probe fits on
    ANALYSIS (Draw.COLD_ORDER, t)   the probe's batch order
    ANALYSIS (Draw.COLD_TEST), seed 0: the test images (--test-subset), the same for every seed
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from fedpfn.analysis.fusion import StateDict
from fedpfn.core.arms import COMPARISONS as PAIRS
from fedpfn.core.arms import FUSED, PLAIN
from fedpfn.core.files import CLIENT_STATE, CONFIG, STATE_ROUND, model_file, read_json
from fedpfn.core.init_file import read_state_file
from fedpfn.core.personal import PERSONAL
from fedpfn.core.seeding import Draw, Stream, seed_for, torch_generator
from fedpfn.core.training import OptimizerSpec, evaluate, minibatches, train_local
from partitions.tasks import HELD_OUT_TASKS, label_map, task_of

START = "start"  # the reference: the pretrained start, no fusion
ARMS = (START, *FUSED)
COMPARISONS = (*PAIRS, (PLAIN, START))
METRICS = ("own_task_acc", "linear_acc", "full_acc")
PROBES = ("linear", "full")
HEAD_PREFIX = "classifier."  # the zoo's head (fedpfn.core.models.ZooModel), personal in ColD runs


@dataclass(frozen=True)
class ProbeSpec:
    """How a held-out task's fresh head is fitted: the one local step's optimizer, for a short while."""

    optimizer: OptimizerSpec
    samples: int
    epochs: int
    batch_size: int


@dataclass(frozen=True)
class Images:
    """The training images and labels (source classes), the probes' pool, and the test set."""

    train_x: torch.Tensor
    train_y: torch.Tensor
    pool: torch.Tensor  # training-set indices no contributor trained on
    test_x: torch.Tensor
    test_y: torch.Tensor


def in_task(y: torch.Tensor, task: str) -> tuple[torch.Tensor, torch.Tensor]:
    """(positions of `y` in the task's classes, their labels in the task)."""
    mapped = torch.from_numpy(label_map(task)).to(y.device)[y]
    keep = (mapped >= 0).nonzero().flatten()
    return keep, mapped[keep]


def body_names(model: nn.Module) -> list[str]:
    return [name for name, _ in model.named_parameters() if not name.startswith(HEAD_PREFIX)]


def fresh_head(model: nn.Module, seed: int, task_index: int) -> None:
    """Reset the classifier from the seed: every arm of a seed gets the same new head."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed_for(seed, Stream.ANALYSIS, Draw.COLD_HEAD, task_index))
        model.classifier.reset_parameters()  # type: ignore[operator]


def probe(model: nn.Module, body: StateDict, kind: str, seed: int, task_index: int,
          images: Images, spec: ProbeSpec) -> dict[str, float]:  # fmt: skip
    """Fit a fresh head on held-out task `task_index` from `body`; its test loss and accuracy."""
    task = tuple(HELD_OUT_TASKS)[task_index]
    model.load_state_dict(body)
    fresh_head(model, seed, task_index)
    keep, labels = in_task(images.train_y[images.pool], task)
    y = torch.full_like(images.train_y, -1)
    y[images.pool[keep]] = labels
    pick = torch.randperm(
        len(keep), generator=torch_generator(seed, Stream.ANALYSIS, Draw.COLD_SAMPLES, task_index)
    )
    chosen = images.pool[keep[pick[: spec.samples]]]
    order = torch_generator(seed, Stream.ANALYSIS, Draw.COLD_ORDER, task_index)
    batches = minibatches(chosen, spec.batch_size, spec.epochs, order)
    frozen = {
        n: torch.ones_like(p, dtype=torch.bool) for n, p in model.named_parameters() if n in body_names(model)
    }
    buffers = {n: b.detach().clone() for n, b in model.named_buffers()}
    fitted = train_local(
        model, images.train_x, y, batches, spec.optimizer, frozen if kind == "linear" else None
    )
    if kind == "linear":  # BatchNorm statistics move in training mode; the body keeps its own
        with torch.no_grad():
            for name, value in model.named_buffers():
                value.copy_(buffers[name])
    at, test_labels = in_task(images.test_y, task)
    loss, acc = evaluate(model, images.test_x[at], test_labels)
    return {"loss": loss, "acc": acc, "fit_steps": fitted.steps, "fit_acc": fitted.accuracy}


def held_out_figures(model: nn.Module, body: StateDict, seed: int, images: Images,
                     spec: ProbeSpec) -> dict[str, Any]:  # fmt: skip
    """Every held-out task under both probes, and each probe's mean accuracy over the tasks."""
    per_task = {
        kind: {task: probe(model, body, kind, seed, t, images, spec) for t, task in enumerate(HELD_OUT_TASKS)}
        for kind in PROBES
    }
    means = {f"{kind}_acc": float(np.mean([f["acc"] for f in per_task[kind].values()])) for kind in PROBES}
    return {**means, "held_out": per_task}


def own_task_figures(model: nn.Module, body: StateDict, heads: Mapping[int, StateDict],
                     images: Images) -> dict[str, Any]:  # fmt: skip
    """Each contributor's accuracy on its task's test images with its own head on the fused body."""
    per_contributor = {}
    for pid, head in sorted(heads.items()):
        model.load_state_dict({**body, **head})
        at, labels = in_task(images.test_y, task_of(pid))
        loss, acc = evaluate(model, images.test_x[at], labels)
        per_contributor[str(pid)] = {"task": task_of(pid), "loss": loss, "acc": acc}
    mean = float(np.mean([f["acc"] for f in per_contributor.values()]))
    return {"own_task_acc": mean, "contributors": per_contributor}


# --------------------------------------------------------------------------- a run folder, read safely


class RunReadError(ValueError):
    """A ColD run folder that cannot be evaluated (one line)."""


def newest_personal(folder: Path, pid: int) -> StateDict:
    """Contributor `pid`'s head from its newest saved `personal` record (npz, never unpickled)."""
    where = folder / CLIENT_STATE / str(pid) / PERSONAL
    found = {int(m.group(1)): p for p in where.glob("r*.npz") if (m := STATE_ROUND.fullmatch(p.name))}
    if not found:
        raise RunReadError(f"{where}: no saved head (was the run started with --personal?)")
    path = found[max(found)]
    if path.is_symlink() or not path.is_file():
        raise RunReadError(f"{path} is not a plain file")
    with np.load(path, allow_pickle=False) as saved:
        return {name: torch.from_numpy(saved[name].copy()) for name in saved.files}


def read_cold_run(folder: Path, max_bytes: int) -> tuple[dict[str, Any], StateDict, dict[int, StateDict]]:
    """(config.json, the final global model, every contributor's head) of a finished ColD run; the
    model's file may declare at most `max_bytes` (fedpfn.core.init_file.storage_budget of the model)."""
    config = read_json(folder / CONFIG)
    final = folder / model_file(int(config["rounds"]))
    if not final.is_file() or final.is_symlink():
        raise RunReadError(f"{final}: missing (the run did not finish)")
    body = read_state_file(final, max_bytes)
    heads = {pid: newest_personal(folder, pid) for pid in range(int(config["num_clients"]))}
    return config, body, heads
