"""Linear mode connectivity and one-shot fusion: the analysis behind `python -m fedpfn.analysis.lmc`.

K models start from ONE initialisation and train on their own data (Dirichlet shards, or the
same data in their own batch orders), plainly or with one anchor mask fixed for the whole
training (TNA-PFN). This module trains them and measures how well they line up:

- interpolation curves: test loss and accuracy of (1 - a) w_A + a w_B at evenly spaced a;
- barriers: the largest rise of a curve above the straight line between its end points
  (loss), or fall below it (accuracy, also relative to the line there);
- fusion: accuracy of the plain average of the K models against the mean of their own.

Models with BatchNorm get their running statistics recomputed for every measured model (end
points, interpolations, averages alike) on the same fixed training batches, since averaged
weights do not go with averaged statistics.

Every random draw comes from `fedpfn.core.seeding`, keyed by the analysis seed:

    INIT                   the shared initialisation of the K models
    ANALYSIS (TRAIN_POOL)  the training subset
    PARTITION              the Dirichlet shards of that subset
    DATA_ORDER (0, k)      model k's batch order: the same in the plain and anchored settings
    MASK (0)               the anchor mask: one per seed, shared by the K models and every ratio
    ANALYSIS (BN_BATCHES)  the batches BatchNorm statistics are recomputed on
    ANALYSIS (TEST_POOL), seed 0: the fixed test subset, the same for every seed
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from enum import IntEnum
from typing import Any

import torch
from torch import nn

from fedpfn.core.anchors import AnchorMask, draw_mask
from fedpfn.core.models import build_model
from fedpfn.core.seeding import Stream, seed_for, torch_generator
from fedpfn.core.training import OptimizerSpec, evaluate, minibatches, train_local
from partitions import partition_labels

StateDict = dict[str, torch.Tensor]

SPLITS = ("dirichlet", "same-data")
BARRIERS = ("loss_barrier", "acc_barrier", "acc_barrier_rel")
METRICS = (*BARRIERS, "fused_acc", "mean_individual_acc", "fusion_gap")


class Draw(IntEnum):
    """Keys of `Stream.ANALYSIS`: the analysis's own draws."""

    TRAIN_POOL = 0
    BN_BATCHES = 1
    TEST_POOL = 2


# --------------------------------------------------------------------------- weights


def snapshot(model: nn.Module) -> StateDict:
    """A detached copy of the model's state dict, safe from later training."""
    return {name: t.detach().clone() for name, t in model.state_dict().items()}


def interpolate_state(state_a: StateDict, state_b: StateDict, a: float) -> StateDict:
    """(1 - a) w_A + a w_B per floating tensor; other tensors (BN batch counters) come from A.

    `torch.lerp` is exact at both ends (a = 0 gives w_A and a = 1 gives w_B bit for bit, and
    w_A = w_B gives w_A for every a), so a curve's end points are the models themselves.
    """
    return {
        name: torch.lerp(value, state_b[name], a) if value.is_floating_point() else value.clone()
        for name, value in state_a.items()
    }


def average_states(states: Sequence[StateDict]) -> StateDict:
    """The plain (unweighted) average of K states, as FedAvg over equal clients would give.

    Written as w_0 + mean_k(w_k - w_0) so that K identical models average to themselves exactly.
    """
    if not states:
        raise ValueError("average_states needs at least one state")
    first = states[0]
    fused = {}
    for name, value in first.items():
        if value.is_floating_point():
            fused[name] = value + torch.stack([s[name] - value for s in states]).mean(0)
        else:
            fused[name] = value.clone()
    return fused


# --------------------------------------------------------------------------- BatchNorm


def _batchnorms(model: nn.Module) -> list[nn.modules.batchnorm._BatchNorm]:
    return [m for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]


def has_batchnorm(model: nn.Module) -> bool:
    return bool(_batchnorms(model))


@torch.no_grad()
def reset_bn_stats(model: nn.Module, x: torch.Tensor, batches: Sequence[torch.Tensor]) -> None:
    """Recompute BatchNorm running statistics as the plain average over `batches` of `x`.

    Interpolated and averaged weights do not go with interpolated or averaged statistics
    (Jordan et al., REPAIR, 2023), so every measured model gets its own, from the same batches.
    Momentum None makes the running estimate a cumulative average; train mode, no gradients.
    """
    norms = _batchnorms(model)
    if not norms:
        return
    saved = [(m, m.momentum) for m in norms]
    was_training = model.training
    device = next(model.parameters()).device
    for m in norms:
        m.reset_running_stats()
        m.momentum = None
    model.train()
    try:
        for batch in batches:
            model(x[batch.to(x.device)].to(device))
    finally:
        for m, momentum in saved:
            m.momentum = momentum
        model.train(was_training)


@dataclass
class Probe:
    """Everything needed to measure a set of weights the same way every time."""

    model: nn.Module  # a skeleton the weights are loaded into
    test_x: torch.Tensor
    test_y: torch.Tensor
    bn_x: torch.Tensor | None = None  # training inputs for BatchNorm statistics
    bn_batches: tuple[torch.Tensor, ...] = ()
    eval_batch_size: int = 256  # CPU convolutions run about twice as fast as at 1000

    def measure(self, state: StateDict) -> tuple[float, float]:
        """(test loss, test accuracy) of `state`, BatchNorm statistics recomputed if the model has any."""
        self.model.load_state_dict(state)
        if self.bn_x is not None and self.bn_batches:
            reset_bn_stats(self.model, self.bn_x, self.bn_batches)
        return evaluate(self.model, self.test_x, self.test_y, self.eval_batch_size)


# --------------------------------------------------------------------------- curves and barriers


def interpolation_curve(
    probe: Probe, state_a: StateDict, state_b: StateDict, points: int = 11
) -> dict[str, list[float]]:
    """Test loss and accuracy at `points` evenly spaced a in [0, 1], both end points included."""
    if points < 2:
        raise ValueError(f"points={points}: an interpolation curve needs at least its two end points")
    alphas = [i / (points - 1) for i in range(points)]
    measured = [probe.measure(interpolate_state(state_a, state_b, a)) for a in alphas]
    return {"alpha": alphas, "loss": [loss for loss, _ in measured], "acc": [acc for _, acc in measured]}


def barrier(alphas: Sequence[float], values: Sequence[float], higher_is_worse: bool = True) -> float:
    """Largest excess of the curve over the straight line between its end points.

    Loss (higher is worse): max_a [L(a) - ((1 - a) L(0) + a L(1))]. Accuracy: max_a of the line
    minus the curve. Never negative when the end points are on the grid; 0 means no barrier.
    """
    start, end = values[0], values[-1]
    sign = 1.0 if higher_is_worse else -1.0
    return max(sign * (v - ((1 - a) * start + a * end)) for a, v in zip(alphas, values))


def relative_acc_barrier(alphas: Sequence[float], accs: Sequence[float]) -> float:
    """The accuracy barrier as a fraction of the straight line's accuracy at the point where it peaks."""
    start, end = accs[0], accs[-1]
    line = [(1 - a) * start + a * end for a in alphas]
    gaps = [lv - v for lv, v in zip(line, accs)]
    worst = max(range(len(gaps)), key=gaps.__getitem__)
    return gaps[worst] / line[worst] if line[worst] > 0 else 0.0


def curve_barriers(curve: dict[str, list[float]]) -> dict[str, float]:
    """Loss barrier, accuracy barrier and relative accuracy barrier of one curve."""
    return {
        "loss_barrier": barrier(curve["alpha"], curve["loss"], higher_is_worse=True),
        "acc_barrier": barrier(curve["alpha"], curve["acc"], higher_is_worse=False),
        "acc_barrier_rel": relative_acc_barrier(curve["alpha"], curve["acc"]),
    }


def fuse(probe: Probe, states: Sequence[StateDict]) -> dict[str, Any]:
    """Accuracy of the averaged model against the mean of the models' own; gap = mean own - fused."""
    own = [probe.measure(s) for s in states]
    fused_loss, fused_acc = probe.measure(average_states(states))
    mean_acc = sum(acc for _, acc in own) / len(own)
    return {
        "individual_loss": [loss for loss, _ in own],
        "individual_acc": [acc for _, acc in own],
        "mean_individual_acc": mean_acc,
        "fused_loss": fused_loss,
        "fused_acc": fused_acc,
        "fusion_gap": mean_acc - fused_acc,
    }


def analyse(probe: Probe, states: Sequence[StateDict], points: int) -> dict[str, Any]:
    """Curves and barriers for every pair of models, their mean over pairs, and the fusion figures."""
    pairs = []
    for i, j in itertools.combinations(range(len(states)), 2):
        curve = interpolation_curve(probe, states[i], states[j], points)
        pairs.append({"models": [i, j], **curve, **curve_barriers(curve)})
    result: dict[str, Any] = {key: sum(p[key] for p in pairs) / len(pairs) for key in BARRIERS}
    result.update(fuse(probe, states))
    result["pairs"] = pairs
    return result


# --------------------------------------------------------------------------- seeded draws


def initial_model(
    name: str, input_shape: tuple[int, int, int], num_classes: int, seed: int, device: torch.device
) -> tuple[nn.Module, StateDict]:
    """The K models' shared start, built from the seed's INIT stream without touching global RNG state."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed_for(seed, Stream.INIT))
        model = build_model(name, input_shape, num_classes).to(device)
    return model, snapshot(model)


def sample_pool(size: int, keep: int, seed: int, draw: Draw) -> torch.Tensor:
    """A seeded random order of range(size), cut to its first `keep` (0 keeps all)."""
    order = torch.randperm(size, generator=torch_generator(seed, Stream.ANALYSIS, draw))
    return order[:keep] if keep else order


def split_pool(
    labels: torch.Tensor, pool: torch.Tensor, k: int, split: str, alpha: float, seed: int
) -> list[torch.Tensor]:
    """Training indices for each of the K models: Dirichlet(alpha) shards of `pool`, or all of it each."""
    if split == "same-data":
        return [pool.clone() for _ in range(k)]
    parts = partition_labels(
        labels[pool].numpy(), k, "dirichlet", alpha=alpha, seed=seed_for(seed, Stream.PARTITION)
    )
    return [pool[torch.from_numpy(p)] for p in parts]


def bn_batches(pool: torch.Tensor, count: int, size: int, seed: int) -> tuple[torch.Tensor, ...]:
    """`count` fixed batches of `size` training indices for BatchNorm statistics."""
    order = pool[sample_pool(len(pool), 0, seed, Draw.BN_BATCHES)]
    return tuple(order.split(size)[:count])


def anchor_mask(model: nn.Module, ratio: float, seed: int, granularity: str) -> AnchorMask | None:
    """The seed's one anchor mask at `ratio` (None when plain).

    Drawn from the same stream for every ratio, so with weight granularity the anchors of a
    smaller ratio are a subset of those of a larger one.
    """
    if ratio == 0:
        return None
    return draw_mask(model, ratio, seed_for(seed, Stream.MASK, 0), granularity)


# --------------------------------------------------------------------------- training


@dataclass(frozen=True)
class TrainSpec:
    """How each of the K models trains (shared by the plain and the anchored settings)."""

    epochs: int = 3
    lr: float = 0.05
    momentum: float = 0.9
    weight_decay: float = 5e-4
    batch_size: int = 64
    optimizer: str = "sgd"


def train_models(
    model: nn.Module,
    init: StateDict,
    data: tuple[torch.Tensor, torch.Tensor],
    indices: Sequence[torch.Tensor],
    seed: int,
    spec: TrainSpec,
    mask: AnchorMask | None = None,
) -> list[StateDict]:
    """Train model k on `indices[k]` from `init`, with `mask`'s entries fixed at their initial values.

    Model k's batches come from the seed's DATA_ORDER stream (0, k) whatever the mask, so
    plain and anchored runs differ only in the anchors. `model` is a skeleton reloaded for each.
    """
    states = []
    optimizer = OptimizerSpec(spec.optimizer, spec.lr, momentum=spec.momentum, weight_decay=spec.weight_decay)
    for k, idx in enumerate(indices):
        model.load_state_dict(init)
        batches = minibatches(
            idx, spec.batch_size, spec.epochs, torch_generator(seed, Stream.DATA_ORDER, 0, k)
        )
        train_local(model, *data, batches, optimizer, mask)
        states.append(snapshot(model))
    return states


# --------------------------------------------------------------------------- over seeds


def mean_std(values: Sequence[float]) -> dict[str, float]:
    """Mean and sample standard deviation (n - 1; 0 for a single value)."""
    n = len(values)
    mean = sum(values) / n
    std = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1)) if n > 1 else 0.0
    return {"mean": mean, "std": std}


def over_seeds(per_seed: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Mean and std over seeds of each figure, and the mean curve over its `n` curves (seeds x pairs)."""
    summary: dict[str, Any] = {key: mean_std([s[key] for s in per_seed]) for key in METRICS}
    curves = [p for s in per_seed for p in s["pairs"]]
    summary["curve"] = {"alpha": curves[0]["alpha"], "n": len(curves)}
    for what in ("loss", "acc"):
        columns = [mean_std(col) for col in zip(*(c[what] for c in curves))]
        summary["curve"][f"{what}_mean"] = [c["mean"] for c in columns]
        summary["curve"][f"{what}_std"] = [c["std"] for c in columns]
    return summary


def paired_difference(
    per_seed: Sequence[dict[str, Any]], baseline: Sequence[dict[str, Any]]
) -> dict[str, Any]:
    """Mean and std over seeds of (setting - baseline) per figure, seed by seed.

    Both settings share the init, the shards and the batches of a seed, so the paired
    difference removes most of the seed-to-seed spread (how skewed the shards happen to be).
    """
    by_seed = {s["seed"]: s for s in baseline}
    return {key: mean_std([s[key] - by_seed[s["seed"]][key] for s in per_seed]) for key in METRICS}
