"""The alignment instruments: interpolation curves, signed barriers, one-shot fusion, matched pairs.

Every figure here is measured on named data (`EvalData`) and says where: the test set, each
model's own held-out data, or the union of a pair's held-out data (`Scope`). Between models
trained on different label distributions the test set favours their average (each end point is
poor on the other's classes), so where a figure is measured is part of what it means.

- curve: loss and accuracy of (1 - a) w_A + a w_B at evenly spaced a, both ends included;
- signed barrier: the largest excess of the curve over the chord between its end points, at
  INTERIOR points only, so it is negative when the whole path beats the chord; the midpoint's
  excess stands beside it. Accuracy figures are chord minus curve, so positive is worse too;
- fusion: the models' own figures against their plain average's, on the same data, with the
  ensemble of the same models (logits averaged, softmax after) beside them: the ceiling a fusion
  is judged against;
- beside every barrier: the same curve on a fixed subset of the models' own training data
  (`train_` keys), the REPAIRed curve (`repair_` keys, `fedpfn.analysis.repair`: the interpolated
  MLP's and CNN's hidden units renormalised to the end points' statistics, so that a barrier is
  not variance collapse) and the distance ||A - B|| over the trainable parameters (buffers left out);
- matched pair: B permuted onto A by a permutation that matching finds, under each matcher
  asked for (`fedpfn.analysis.matchers`: full, masked, changes, activation); the matched
  barrier, the permutation-attributable loss P = L(avg(A, B)) - L(avg(A, pi(B))) and the
  fraction of units pi moves. P > 0: part of what averaging costs is permutation.

Models with BatchNorm get their running statistics recomputed for every measured model (end
points, interpolations, averages, permuted copies alike) on the same fixed training batches,
since averaged or permuted weights do not go with averaged statistics (REPAIR, Jordan et al. 2023).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from fedpfn.analysis import repair
from fedpfn.analysis.matchers import NO_START, over_pairs
from fedpfn.analysis.matchers import match as match_states
from fedpfn.analysis.matching import apply_permutation, permutation_spec
from fedpfn.analysis.repair import has_batchnorm, reset_bn_stats  # noqa: F401 (also imported from here)
from fedpfn.core.training import evaluate

StateDict = dict[str, torch.Tensor]

WHERE = ("test", "own", "union")
BARRIERS = ("loss_barrier", "loss_midpoint", "acc_barrier", "acc_midpoint")
MATCHED = ("matched_loss_barrier", "matched_acc_barrier", "permutation_loss", "moved_fraction")
BESIDE = (  # beside every barrier, where measured (a pair's mean over pairs taken where every pair has it)
    "distance", "matched_distance", "train_loss_barrier", "train_loss_midpoint", "train_acc_barrier",
    "train_acc_midpoint", "repair_loss_barrier", "repair_loss_midpoint", "repair_acc_barrier",
    "repair_acc_midpoint", "midpoint_acc", "repair_midpoint_acc",
)  # fmt: skip
MATCHING = ("none", "midpoint", "curve")  # what weight matching adds: nothing, P only, or the matched curve too


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


def parameter_distance(model: nn.Module, state_a: StateDict, state_b: StateDict) -> float:
    """||A - B||: the L2 norm over `model`'s parameters (buffers such as BN statistics left out)."""
    total = sum(float(((state_a[n] - state_b[n]).double() ** 2).sum()) for n, _ in model.named_parameters())
    return total**0.5


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


# --------------------------------------------------------------------------- where it is measured


@dataclass(frozen=True)
class EvalData:
    """Samples a figure is measured on, with the name written beside the figure."""

    name: str
    x: torch.Tensor
    y: torch.Tensor


@dataclass(frozen=True)
class Scope:
    """Where a pair's or a group's figures are measured: `test`, `own` or `union`.

    test: one test set for every model. own: model k's figures on its own held-out data, the
    group's being the equal-weight mean over its members' sets. union: the members' held-out
    sets pooled (a set shared by several members, as with same-data splits, counted once).
    `train`: a fixed subset of each model's training samples, for the training-data curve.
    """

    where: str
    test: EvalData | None = None
    held_out: tuple[EvalData, ...] = ()
    train: tuple[EvalData, ...] = ()

    def __post_init__(self) -> None:
        if self.where not in WHERE:
            raise ValueError(f"where={self.where!r}: choose one of {', '.join(WHERE)}")
        if self.where == "test" and self.test is None:
            raise ValueError("where='test' needs a test set")
        if self.where != "test" and not self.held_out:
            raise ValueError(f"where={self.where!r} needs each model's held-out data")

    def data_for(self, members: Sequence[int]) -> list[EvalData]:
        """The sets whose figures are averaged (equal weights) for this group of models."""
        if self.where == "test":
            assert self.test is not None
            return [self.test]
        return _pooled(self.held_out, members, self.where == "own", "held-out")

    def train_for(self, members: Sequence[int]) -> list[EvalData]:
        """The training subsets for this group: each its own for `own`, else pooled; [] without any."""
        return _pooled(self.train, members, self.where == "own", "training subset") if self.train else []


def _pooled(sets: Sequence[EvalData], members: Sequence[int], separate: bool, what: str) -> list[EvalData]:
    """The members' sets, each once: separately, or pooled into one named union."""
    chosen = list({id(sets[k]): sets[k] for k in members}.values())
    if separate or len(chosen) == 1:
        return chosen
    name = f"union of {what} " + "+".join(str(k) for k in members)
    return [EvalData(name, torch.cat([d.x for d in chosen]), torch.cat([d.y for d in chosen]))]


@dataclass
class Probe:
    """A model skeleton and fixed training batches: measures any weights the same way every time.

    The batches recompute BatchNorm statistics where the model has BatchNorm, and are REPAIR's
    batches where it has none (`repair_curve`); without them, no REPAIR.
    """

    model: nn.Module
    bn_x: torch.Tensor | None = None  # training inputs for BatchNorm (or REPAIR) statistics
    bn_batches: tuple[torch.Tensor, ...] = ()
    eval_batch_size: int = 256  # CPU convolutions run about twice as fast as at 1000

    def load(self, state: StateDict) -> None:
        """`state` into the skeleton, BN statistics recomputed on the fixed batches."""
        self.model.load_state_dict(state)
        if self.bn_x is not None and self.bn_batches:
            reset_bn_stats(self.model, self.bn_x, self.bn_batches)

    def measure(self, state: StateDict, data: Sequence[EvalData]) -> tuple[float, float]:
        """(loss, accuracy) of `state`, the equal-weight mean over `data`; BN statistics recomputed."""
        self.load(state)
        figures = [evaluate(self.model, d.x, d.y, self.eval_batch_size) for d in data]
        return sum(f[0] for f in figures) / len(figures), sum(f[1] for f in figures) / len(figures)

    @torch.no_grad()
    def logits(self, state: StateDict, x: torch.Tensor) -> torch.Tensor:
        """`state`'s logits on `x` (float64), in eval mode, BN statistics recomputed."""
        self.load(state)
        self.model.eval()
        device = next(self.model.parameters()).device
        step = self.eval_batch_size
        return torch.cat([self.model(x[i : i + step].to(device)).double() for i in range(0, len(x), step)])

    def ensemble(self, states: Sequence[StateDict], data: Sequence[EvalData]) -> tuple[float, float]:
        """(loss, accuracy) of the ensemble of `states`: their logits averaged, softmax after; the
        equal-weight mean over `data`, as `measure`."""
        figures = []
        for d in data:
            mean = torch.stack([self.logits(state, d.x) for state in states]).mean(0)
            y = d.y.to(mean.device)
            figures.append((float(F.cross_entropy(mean, y)), int((mean.argmax(1) == y).sum()) / len(y)))
        return sum(f[0] for f in figures) / len(figures), sum(f[1] for f in figures) / len(figures)


# --------------------------------------------------------------------------- curves and barriers


def interpolation_curve(
    probe: Probe, state_a: StateDict, state_b: StateDict, data: Sequence[EvalData], points: int = 11
) -> dict[str, list[float]]:
    """Loss and accuracy at `points` evenly spaced a in [0, 1], both end points included."""
    if points < 3 or points % 2 == 0:
        raise ValueError(f"points={points}: a curve needs an odd number of points, at least 3 (ends and midpoint)")
    alphas = [i / (points - 1) for i in range(points)]
    measured = [probe.measure(interpolate_state(state_a, state_b, a), data) for a in alphas]
    return {"alpha": alphas, "loss": [loss for loss, _ in measured], "acc": [acc for _, acc in measured]}


def chord_excess(alphas: Sequence[float], values: Sequence[float], higher_is_worse: bool = True) -> list[float]:
    """Curve minus chord at every point (chord minus curve for accuracy): positive is worse; 0 at both
    ends by construction (the figures draw it: a barrier is read as height above the chord)."""
    start, end = values[0], values[-1]
    sign = 1.0 if higher_is_worse else -1.0
    return [sign * (v - ((1 - a) * start + a * end)) for a, v in zip(alphas, values)]


def signed_barrier(alphas: Sequence[float], values: Sequence[float], higher_is_worse: bool = True) -> float:
    """The largest excess of the curve over its chord at the interior points.

    Negative when every interior point beats the chord (the path is better than the line
    between its ends); 0 only when the largest interior excess is 0. The end points are left
    out: their excess is 0 by construction and would clamp the figure at 0.
    """
    if len(values) < 3:
        raise ValueError("a signed barrier needs at least one interior point")
    return max(chord_excess(alphas, values, higher_is_worse)[1:-1])


def midpoint_excess(alphas: Sequence[float], values: Sequence[float], higher_is_worse: bool = True) -> float:
    """The excess of the curve over its chord at a = 0.5 (which must be on the grid)."""
    if 0.5 not in alphas:
        raise ValueError("the midpoint a = 0.5 is not on the curve's grid; use an odd number of points")
    return chord_excess(alphas, values, higher_is_worse)[list(alphas).index(0.5)]


def curve_barriers(curve: dict[str, list[float]], prefix: str = "") -> dict[str, float]:
    """Signed loss and accuracy barriers (nats; accuracy as a fraction) and the midpoint's excess."""
    alphas = curve["alpha"]
    return {
        f"{prefix}loss_barrier": signed_barrier(alphas, curve["loss"], higher_is_worse=True),
        f"{prefix}loss_midpoint": midpoint_excess(alphas, curve["loss"], higher_is_worse=True),
        f"{prefix}acc_barrier": signed_barrier(alphas, curve["acc"], higher_is_worse=False),
        f"{prefix}acc_midpoint": midpoint_excess(alphas, curve["acc"], higher_is_worse=False),
    }


# --------------------------------------------------------------------------- fusion and matching


def fuse(probe: Probe, states: Sequence[StateDict], scope: Scope) -> dict[str, Any]:
    """Each model's own figures against their plain average's on the same data.

    own: model k and the average both on k's held-out data; test and union: everything on the
    one set. gap = mean own accuracy - the average's accuracy (positive: averaging costs). The
    ensemble of the same models (logits averaged, softmax after) on the same data is the ceiling
    the average is judged against: ensemble_gap = its accuracy - the average's (positive: fusion
    falls short of it).
    """
    fused = average_states(states)
    everyone = list(range(len(states)))
    sets = [scope.data_for([k]) for k in everyone] if scope.where == "own" else [scope.data_for(everyone)]
    own = [probe.measure(state, sets[k % len(sets)]) for k, state in enumerate(states)]
    at_fused = [probe.measure(fused, data) for data in sets]
    ensemble = [probe.ensemble(states, data) for data in sets]
    mean = lambda values: sum(values) / len(values)  # noqa: E731
    return {
        "individual_loss": [loss for loss, _ in own],
        "individual_acc": [acc for _, acc in own],
        "mean_individual_loss": mean([loss for loss, _ in own]),
        "mean_individual_acc": mean([acc for _, acc in own]),
        "fused_loss": mean([loss for loss, _ in at_fused]),
        "fused_acc": mean([acc for _, acc in at_fused]),
        "fusion_gap": mean([acc for _, acc in own]) - mean([acc for _, acc in at_fused]),
        "ensemble_loss": mean([loss for loss, _ in ensemble]),
        "ensemble_acc": mean([acc for _, acc in ensemble]),
        "ensemble_gap": mean([acc for _, acc in ensemble]) - mean([acc for _, acc in at_fused]),
    }


# --------------------------------------------------------------------------- beside every barrier


def repair_curve(
    probe: Probe, state_a: StateDict, state_b: StateDict, data: Sequence[EvalData], curve: dict[str, list]
) -> dict[str, Any]:
    """`curve` with its interior points REPAIRed (the ends are the models themselves), its signed
    barriers and the REPAIRed midpoint's accuracy; {} where REPAIR does not apply (`repair.note`)."""
    if probe.bn_x is None or not probe.bn_batches or repair.repair_problem(probe.model):
        return {}
    inner = ((a, interpolate_state(state_a, state_b, a)) for a in curve["alpha"][1:-1])
    x = repair.sample(probe.bn_x, probe.bn_batches)
    path = repair.repaired_path(probe.model, state_a, state_b, inner, x)
    measured = [probe.measure(state, data) for state in path]
    loss = [curve["loss"][0], *(m[0] for m in measured), curve["loss"][-1]]
    acc = [curve["acc"][0], *(m[1] for m in measured), curve["acc"][-1]]
    repaired = {"alpha": curve["alpha"], "loss": loss, "acc": acc}
    return {"repair_loss": loss, "repair_acc": acc, "repair_midpoint_acc": acc[len(acc) // 2],
            **curve_barriers(repaired, prefix="repair_")}  # fmt: skip


def beside_barrier(
    probe: Probe, state_a: StateDict, state_b: StateDict, curve: dict[str, list[float]],
    data: Sequence[EvalData], train: Sequence[EvalData],
) -> dict[str, Any]:  # fmt: skip
    """What a pair's barrier is read against: ||A - B||, the midpoint's own accuracy, the same curve on
    training data (`train`, where given: `train_` keys) and the REPAIRed curve (`repair_` keys)."""
    figures: dict[str, Any] = {
        "distance": parameter_distance(probe.model, state_a, state_b),
        "midpoint_acc": curve["acc"][len(curve["acc"]) // 2],
    }
    if train:
        on_train = interpolation_curve(probe, state_a, state_b, train, len(curve["alpha"]))
        figures.update(train_loss=on_train["loss"], train_acc=on_train["acc"])
        figures.update(curve_barriers(on_train, "train_"))
    figures.update(repair_curve(probe, state_a, state_b, data, curve))
    return figures


def matched_pair(
    probe: Probe, state_a: StateDict, state_b: StateDict, data: Sequence[EvalData], points: int,
    plain_midpoint: float, matcher: str = "full", w0: StateDict | None = None,
) -> dict[str, Any]:  # fmt: skip
    """B permuted onto A by a permutation that `matcher` finds (`fedpfn.analysis.matchers`): P, the
    units moved, ||A - pi(B)||, the matcher's diagnostics and (points > 0) the matched curve.

    P = L(avg(A, B)) - L(avg(A, pi(B))) on `data` (`plain_midpoint` is the first): the loss of the
    plain average that the permutation accounts for (0 when pi is the identity; negative if
    matching made the average worse). `points` 0 measures the matched midpoint only. Activation
    matching correlates on `data`'s inputs; `changes` without a common start w0 is omitted, with why.
    """
    if matcher == "changes" and w0 is None:
        return {"omitted": NO_START}
    inputs = torch.cat([d.x for d in data]) if matcher == "activation" else None
    found = match_states(matcher, probe.model, state_a, state_b, w0=w0, inputs=inputs)
    permuted = apply_permutation(permutation_spec(probe.model), found.perms, state_b)
    figures: dict[str, Any] = found.diagnostics()
    figures["matched_distance"] = parameter_distance(probe.model, state_a, permuted)
    if points:
        curve = interpolation_curve(probe, state_a, permuted, data, points)
        matched_midpoint = curve["loss"][points // 2]
        barriers = curve_barriers(curve, prefix="matched_")
        figures.update(matched_loss=curve["loss"], matched_acc=curve["acc"],
                       matched_loss_barrier=barriers["matched_loss_barrier"],
                       matched_acc_barrier=barriers["matched_acc_barrier"])  # fmt: skip
    else:
        matched_midpoint = probe.measure(average_states([state_a, permuted]), data)[0]
    figures["permutation_loss"] = plain_midpoint - matched_midpoint + 0.0  # + 0.0: never -0.0
    return figures


def analyse(
    probe: Probe, states: Sequence[StateDict], scope: Scope, points: int = 11, match: str = "curve",
    matchers: Sequence[str] = ("full",), w0: StateDict | None = None,
) -> dict[str, Any]:  # fmt: skip
    """Curves and signed barriers for every pair, with matching (`match`: none, midpoint, curve) under
    each of `matchers` (`full` required: the top-level matched figures are its; w0 the models' common
    start, None for none); the mean over pairs of each figure; the fusion figures of all K; where."""
    if match not in MATCHING:
        raise ValueError(f"match={match!r}: choose one of {', '.join(MATCHING)}")
    if match != "none" and "full" not in matchers:
        raise ValueError(f"matchers={','.join(matchers)}: full is required, the top-level matched figures are its")
    pairs = []
    for i, j in itertools.combinations(range(len(states)), 2):
        data = scope.data_for([i, j])
        curve = interpolation_curve(probe, states[i], states[j], data, points)
        pair = {"models": [i, j], **curve, **curve_barriers(curve)}
        pair.update(beside_barrier(probe, states[i], states[j], curve, data, scope.train_for([i, j])))
        if match != "none":
            matched_points = points if match == "curve" else 0
            pair["matchers"] = {name: matched_pair(probe, states[i], states[j], data, matched_points,
                                                   curve["loss"][points // 2], name, w0) for name in matchers}  # fmt: skip
            pair.update(pair["matchers"]["full"])
        pairs.append(pair)
    keys = BARRIERS + {"none": (), "midpoint": MATCHED[2:], "curve": MATCHED}[match]
    keys += tuple(key for key in BESIDE if all(key in p for p in pairs))
    result: dict[str, Any] = {key: sum(p[key] for p in pairs) / len(pairs) for key in keys}
    result.update(fuse(probe, states, scope))
    if match != "none":
        result["matchers"] = over_pairs([p["matchers"] for p in pairs])
    result["measured_on"] = scope.where
    result["repair"] = repair.note(probe.model, probe.bn_batches if probe.bn_x is not None else ())
    result["pairs"] = pairs
    return result
