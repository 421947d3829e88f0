"""The alignment gate's runs: K models per seed in each arm, trained and measured the same way.

Arms (every anchored arm at each anchor ratio):

    plain            one start, no anchors
    shared-R         one start, ONE anchor mask at ratio R shared by the K models (TNA-PFN)
    independent-R    one start, each model its OWN mask at ratio R: the control that freezes as
                     much and shares nothing, so anchoring is told apart from sharing
    diff-init        each model its own random initialisation, no anchors: the positive control,
                     where permutation misalignment is known to exist

The start is the random initialisation (`init`) or that initialisation trained N epochs on the
whole pool (`trained:N`, Frankle et al. 2020's spawning point); anchors hold the start's values.

Every random draw comes from `fedpfn.core.seeding`, keyed by the analysis seed:

    INIT                    the shared initialisation (diff-init: INIT (k + 1) for model k)
    ANALYSIS (TRAIN_POOL)   the training subset; (HELD_OUT) each model's held-out part of it
    PARTITION               the Dirichlet shards of that subset
    ANALYSIS (START_ORDER)  the batch order of the shared start's N epochs
    DATA_ORDER (0, k)       model k's batch order: the same in every arm
    MASK (0)                the shared mask; CLIENT_MASK (0, k): model k's independent mask
    ANALYSIS (BN_BATCHES)   the batches BatchNorm statistics (REPAIR's, without BatchNorm) are computed on
    ANALYSIS (TRAIN_EVAL, k) model k's training subset that the training-data curve is measured on
    ANALYSIS (TEST_POOL), seed 0: the fixed test subset, the same for every seed
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from fedpfn.analysis.fusion import EvalData, Probe, Scope, StateDict, analyse, snapshot
from fedpfn.analysis.inference import mean_std
from fedpfn.analysis.matchers import FIGURES as MATCHER_FIGURES
from fedpfn.core.anchors import AnchorMask, AnchorScope, anchored_fraction, draw_mask
from fedpfn.core.arms import ANCHORED, DIFF_INIT, GATE, INDEPENDENT, PLAIN, SHARED
from fedpfn.core.models import build_model
from fedpfn.core.seeding import Draw, Stream, seed_for, torch_generator
from fedpfn.core.training import OptimizerSpec, minibatches, train_local
from fedpfn.experiments.lmc_render import DIVERGED, measured  # noqa: F401  (measured: lmc.json's reading, re-exported)
from partitions import partition_labels

SPLITS = ("dirichlet", "same-data")
ARM_KINDS = GATE
FIGURES = (
    "loss_barrier", "loss_midpoint", "acc_barrier", "acc_midpoint",
    "matched_loss_barrier", "matched_acc_barrier", "permutation_loss", "moved_fraction",
    "fused_acc", "mean_individual_acc", "fusion_gap",
    # beside them (`fusion.BESIDE`, `fusion.fuse`); older results lack them, and summaries skip a figure
    # that some seed lacks (a BatchNorm model has no REPAIR figures)
    "ensemble_acc", "ensemble_gap", "distance", "matched_distance", "train_loss_barrier", "train_acc_barrier",
    "repair_loss_barrier", "repair_acc_barrier", "midpoint_acc", "repair_midpoint_acc",
)  # fmt: skip


@dataclass(frozen=True)
class Arm:
    """One way of training the K models: its kind and, for anchored kinds, the ratio."""

    kind: str
    ratio: float = 0.0

    @property
    def name(self) -> str:
        return f"{self.kind}-{self.ratio:g}" if self.kind in ANCHORED else self.kind


def arms_for(kinds: Sequence[str], ratios: Sequence[float]) -> list[Arm]:
    """Plain first, the anchored kinds at each ratio, the positive control last."""
    arms = [Arm(PLAIN)] if PLAIN in kinds else []
    arms += [Arm(kind, r) for r in ratios for kind in ANCHORED if kind in kinds]
    return arms + ([Arm(DIFF_INIT)] if DIFF_INIT in kinds else [])


@dataclass(frozen=True)
class TrainSpec:
    """How each model trains (the same in every arm); `start_epochs` > 0 trains the shared start first."""

    epochs: int = 3
    lr: float = 0.05
    momentum: float = 0.9
    weight_decay: float = 5e-4
    batch_size: int = 64
    optimizer: str = "sgd"
    start_epochs: int = 0

    def optimizer_spec(self) -> OptimizerSpec:
        return OptimizerSpec(self.optimizer, self.lr, momentum=self.momentum, weight_decay=self.weight_decay)


# --------------------------------------------------------------------------- seeded draws


def initial_model(
    name: str, input_shape: tuple[int, int, int], num_classes: int, seed: int, device: torch.device,
    width: int = 0, which: int = 0,
) -> tuple[nn.Module, StateDict]:
    """An initialisation from the seed's INIT stream (`which` > 0: another one), global RNG untouched."""  # fmt: skip
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed_for(seed, Stream.INIT, *([which] if which else [])))
        model = build_model(name, input_shape, num_classes, width=width).to(device)
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


def hold_out(indices: Sequence[torch.Tensor], fraction: float, seed: int) -> tuple[list, list]:
    """Each shard split into (training, held-out) by one seeded order; equal shards split equally."""
    train, held = [], []
    cache: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
    for k, idx in enumerate(indices):
        key = next((j for j in cache if torch.equal(indices[j], idx)), k)
        if key not in cache:
            draw = torch_generator(seed, Stream.ANALYSIS, Draw.LMC_HELD_OUT, k)
            order = idx[torch.randperm(len(idx), generator=draw)]
            cut = math.ceil(fraction * len(idx))
            cache[key] = (order[cut:], order[:cut])
        train.append(cache[key][0])
        held.append(cache[key][1])
    return train, held


def bn_batches(pool: torch.Tensor, count: int, size: int, seed: int) -> tuple[torch.Tensor, ...]:
    """`count` fixed batches of `size` training indices for BatchNorm statistics."""
    order = pool[sample_pool(len(pool), 0, seed, Draw.LMC_BN_BATCHES)]
    return tuple(order.split(size)[:count])


def masks_for(
    arm: Arm, model: nn.Module, k: int, seed: int, granularity: str, scope: AnchorScope = AnchorScope()
) -> list[AnchorMask | None]:
    """The K models' masks in `arm`: none, one shared, or each its own (CLIENT_MASK (0, k)); `scope`
    says whether they hold the classifier, the biases and the norm layers."""
    within = scope.mask_options()
    if arm.kind == SHARED:
        return [draw_mask(model, arm.ratio, seed_for(seed, Stream.MASK, 0), granularity, **within)] * k
    if arm.kind == INDEPENDENT:
        seeds = [seed_for(seed, Stream.CLIENT_MASK, 0, i) for i in range(k)]
        return [draw_mask(model, arm.ratio, s, granularity, **within) for s in seeds]
    return [None] * k


# --------------------------------------------------------------------------- one seed


@dataclass
class SeedSetup:
    """What every arm of one seed shares: data, starts, shards, held-out sets, the probe."""

    seed: int
    model: nn.Module
    starts: list[StateDict]  # the shared start, then (diff-init) each model's own
    indices: list[torch.Tensor]  # each model's training samples
    scope: Scope
    probe: Probe


def train_start(model: nn.Module, init: StateDict, train: tuple, pool: torch.Tensor, seed: int, spec: TrainSpec) -> StateDict:
    """`init` trained `spec.start_epochs` epochs on the whole pool: the spawning point (or `init` itself)."""
    if not spec.start_epochs:
        return init
    model.load_state_dict(init)
    order = torch_generator(seed, Stream.ANALYSIS, Draw.LMC_START_ORDER)
    train_local(model, *train, minibatches(pool, spec.batch_size, spec.start_epochs, order), spec.optimizer_spec())
    return snapshot(model)


def train_arm(
    setup: SeedSetup, arm: Arm, train: tuple, spec: TrainSpec, granularity: str, scope: AnchorScope = AnchorScope()
) -> list[StateDict]:
    """Model k trained on its samples from its start, its mask's entries fixed at the start's values.

    Model k's batches come from DATA_ORDER (0, k) in every arm, so arms differ only in the anchors
    (or, for diff-init, the start).
    """
    k = len(setup.indices)
    masks = masks_for(arm, setup.model, k, setup.seed, granularity, scope)
    states = []
    for i, (idx, mask) in enumerate(zip(setup.indices, masks)):
        start = setup.starts[1 + i] if arm.kind == "diff-init" else setup.starts[0]
        setup.model.load_state_dict(start)
        batches = minibatches(idx, spec.batch_size, spec.epochs, torch_generator(setup.seed, Stream.DATA_ORDER, 0, i))
        train_local(setup.model, *train, batches, spec.optimizer_spec(), mask)
        if not all(bool(p.isfinite().all()) for p in setup.model.parameters()):
            raise Diverged(f"model {i}'s weights are not finite after training (it diverged at lr {spec.lr:g})")
        states.append(snapshot(setup.model))
    return states


class Diverged(ValueError):
    """A model's training diverged: its figures would be meaningless (and matching cannot run on them)."""


def run_arm(
    setup: SeedSetup, arm: Arm, train: tuple, spec: TrainSpec, granularity: str, points: int,
    matchers: Sequence[str] = ("full",), scope: AnchorScope = AnchorScope(),
) -> dict:  # fmt: skip
    """Train the K models of one seed in `arm` and measure them (barriers, matching under each of
    `matchers`, fusion); the models' common start is w0 (diff-init's models have none); anchors within `scope`."""
    started = time.perf_counter()
    masks = masks_for(arm, setup.model, 1, setup.seed, granularity, scope)
    found: dict[str, Any] = {
        "seed": setup.seed,
        "shard_sizes": [len(i) for i in setup.indices],
        "anchored_fraction": anchored_fraction(masks[0]) if masks[0] is not None else 0.0,
    }
    try:
        states = train_arm(setup, arm, train, spec, granularity, scope)
    except Diverged as err:  # a reading of the regime, not a crash: the other arms and seeds still count
        return {**found, DIVERGED: str(err), "seconds": time.perf_counter() - started}
    figures = analyse(setup.probe, states, setup.scope, points, match="curve", matchers=matchers,
                      w0=None if arm.kind == "diff-init" else setup.starts[0])  # fmt: skip
    return {**found, **figures, "seconds": time.perf_counter() - started}


# --------------------------------------------------------------------------- over seeds


def spread(values: Sequence[float]) -> dict[str, float | None]:
    """{'mean', 'std'} as lmc.json keeps them (`inference.mean_std`: no std, null, from one seed)."""
    mean, std = mean_std(values)
    return {"mean": mean, "std": std}


def figures_in(per_seed: Sequence[dict[str, Any]]) -> list[str]:
    """The FIGURES every seed has (results written before a figure existed lack it)."""
    return [key for key in FIGURES if all(key in s for s in per_seed)]


def over_seeds(per_seed: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Mean and std over seeds of each figure, and the mean curve over its `n` curves (seeds x pairs)."""
    if not per_seed:
        return {}
    summary: dict[str, Any] = {key: spread([s[key] for s in per_seed]) for key in figures_in(per_seed)}
    curves = [p for s in per_seed for p in s["pairs"]]
    summary["curve"] = {"alpha": curves[0]["alpha"], "n": len(curves)}
    kinds = ("loss", "acc", "matched_loss", "matched_acc", "train_loss", "train_acc", "repair_loss", "repair_acc")
    for what in (kind for kind in kinds if all(kind in c for c in curves)):
        columns = [spread(col) for col in zip(*(c[what] for c in curves))]
        summary["curve"][f"{what}_mean"] = [c["mean"] for c in columns]
        summary["curve"][f"{what}_std"] = [c["std"] for c in columns]
    return summary


def paired_difference(per_seed: Sequence[dict[str, Any]], baseline: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Mean and std over seeds of (arm - baseline) per figure, seed by seed (shared starts and shards),
    over the seeds both have; {} where they share none."""
    by_seed = {s["seed"]: s for s in baseline}
    both = [s for s in per_seed if s["seed"] in by_seed]
    if not both:
        return {}
    keys = figures_in([*both, *baseline])
    return {key: spread([s[key] - by_seed[s["seed"]][key] for s in both]) for key in keys}


def by_matcher(per_seed: Sequence[dict[str, Any]], baseline: Sequence[dict[str, Any]] = ()) -> dict[str, Any]:
    """Each matcher's figures over seeds (minus `baseline`'s seed by seed, where given), its seeds
    whose weight matching stopped unconverged, or why it was omitted; {} for results without matchers."""
    base = {s["seed"]: s["matchers"] for s in baseline if "matchers" in s}
    both = [s for s in per_seed if not baseline or s["seed"] in base]
    if not both or not all("matchers" in s for s in both):
        return {}
    found: dict[str, Any] = {}
    for name in both[0]["matchers"]:
        entries = [(s["seed"], s["matchers"][name], base[s["seed"]][name] if baseline else {}) for s in both]
        omitted = [e.get("omitted") or b.get("omitted") for _, e, b in entries]
        if any(omitted):
            found[name] = {"omitted": next(reason for reason in omitted if reason)}
            continue
        keys = [key for key in MATCHER_FIGURES if all(key in e for _, e, _ in entries)]
        found[name] = {key: spread([e[key] - b.get(key, 0.0) for _, e, b in entries]) for key in keys}
        if all("converged" in e for _, e, _ in entries):
            found[name]["unconverged_seeds"] = sum(not e["converged"] for _, e, _ in entries)
    return found


def held_out_sets(
    train_x: torch.Tensor, train_y: torch.Tensor, held: Sequence[torch.Tensor], what: str = "held-out"
) -> tuple[EvalData, ...]:
    """Each model's held-out samples as named data (equal index sets give one shared object)."""
    made: list[tuple[torch.Tensor, EvalData]] = []
    sets = []
    for k, idx in enumerate(held):
        same = next((d for i, d in made if torch.equal(i, idx)), None)
        if same is None:
            same = EvalData(f"{what} of model {k}", train_x[idx.to(train_x.device)], train_y[idx.to(train_y.device)])
            made.append((idx, same))
        sets.append(same)
    return tuple(sets)


def train_subsets(indices: Sequence[torch.Tensor], sizes: Sequence[int], seed: int) -> list[torch.Tensor]:
    """A seeded subset of each model's training samples, `sizes[k]` of them (all where fewer), for the
    training-data curve; models trained on the same samples get the same subset."""
    chosen: list[torch.Tensor] = []
    for k, idx in enumerate(indices):
        same = next((j for j in range(k) if torch.equal(indices[j], idx)), None)
        if same is not None:
            chosen.append(chosen[same])
            continue
        order = torch.randperm(len(idx), generator=torch_generator(seed, Stream.ANALYSIS, Draw.LMC_TRAIN_EVAL, k))
        chosen.append(idx[order[: sizes[k]]])
    return chosen


def bn_probe(model: nn.Module, train_x: torch.Tensor, pool: torch.Tensor, count: int, size: int, seed: int) -> Probe:
    """A probe over `model` with fixed batches from `pool`: BatchNorm's statistics where the model has
    BatchNorm, REPAIR's where it has none (`fusion.repair_curve`)."""
    return Probe(model, train_x, bn_batches(pool, count, size, seed))
