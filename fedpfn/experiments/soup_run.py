"""Model soups with and without shared anchors: the computation behind `python -m fedpfn.experiments.soup`.

For each seed, K ingredients fine-tune from ONE start (the pretrained file, with the seed's
classifier where the task is new) on the downstream training samples, each with its own
hyperparameters (a seeded draw from the declared grid), batch order and augmentation stream.
Three arms share all of that and differ only in anchors:

- plain: nothing fixed;
- shared: one anchor mask per seed, the same for every ingredient, fixed at the start's values
  (TNA-PFN): every ingredient keeps those entries bit for bit;
- independent: each ingredient its own mask at the same ratio (the control: it freezes as much
  and shares nothing).

Soups (Wortsman et al. 2022) are built and selected on the held-out split only: the uniform soup
averages every ingredient; the greedy soup takes the ingredients in order of held-out accuracy
and keeps each only if the soup's held-out accuracy does not fall; the best single ingredient is
the one of highest held-out accuracy. Only then is each measured on the test set. Barriers
between ingredient pairs are signed (`fedpfn.analysis.fusion.curve_barriers`) on the test set.

Every random draw comes from `fedpfn.core.seeding`, keyed by the seed:

    INIT                            the start's classifier (where it is fresh)
    ANALYSIS (Draw.SOUP_POOL)       the downstream samples: training subset and held-out split
    ANALYSIS (Draw.SOUP_GRID)       which hyperparameters of the grid ingredient k takes
    ANALYSIS (Draw.SOUP_AUGMENT, k) ingredient k's augmentation (flips and shifts)
    DATA_ORDER (0, k)               ingredient k's batch order
    MASK (0)                        the shared arm's mask; MASK (1, k): the independent arm's mask k
    ANALYSIS (Draw.SOUP_BN)         the batches BatchNorm statistics are recomputed on (models that have it)
    ANALYSIS (Draw.SOUP_TEST), seed 0: the fixed test subset, the same for every seed
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from fedpfn.analysis.fusion import (
    EvalData,
    Probe,
    StateDict,
    average_states,
    curve_barriers,
    interpolation_curve,
    parameter_distance,
)
from fedpfn.core.anchors import AnchorMask, AnchorScope, draw_mask
from fedpfn.core.arms import COMPARISONS, FUSED, PLAIN, SHARED
from fedpfn.core.seeding import Draw, Stream, numpy_rng, seed_for, torch_generator
from fedpfn.core.training import LossTerm, OptimizerSpec, StepView, minibatches, train_local

ARMS = FUSED
METRICS = (  # per seed and arm: what the paired comparisons read (accuracies on the test set)
    "uniform_acc", "greedy_acc", "best_acc", "mean_ingredient_acc", "uniform_gain", "greedy_gain",
    "loss_barrier", "acc_barrier", "ensemble_acc",
)  # fmt: skip
SPANS: dict[str, float | None] = {  # the largest difference of each metric between arms (a gain's: 2)
    metric: None if metric == "loss_barrier" else 2.0 if metric.endswith(("_gain", "_barrier")) else 1.0
    for metric in METRICS
}
SHIFT = 2  # pixels an augmented image may move each way


@dataclass(frozen=True)
class Recipe:
    """One ingredient's hyperparameters."""

    lr: float
    epochs: int
    augment: bool
    label_smoothing: float


def recipes(grid: dict[str, Sequence[Any]], k: int, seed: int) -> list[Recipe]:
    """K recipes: a seeded order of the grid's combinations, taken in turn (repeating past its size)."""
    combos = list(itertools.product(grid["lr"], grid["epochs"], grid["augment"], grid["label_smoothing"]))
    order = numpy_rng(seed, Stream.ANALYSIS, Draw.SOUP_GRID).permutation(len(combos))
    return [Recipe(*combos[order[i % len(combos)]]) for i in range(k)]


def smoothing_term(epsilon: float) -> LossTerm | None:
    """Label smoothing as a loss term: with the step's cross-entropy it makes
    (1 - eps) CE + eps * mean over classes of -log p, torch's `label_smoothing=eps`."""
    if epsilon == 0:
        return None

    def term(view: StepView) -> torch.Tensor:
        uniform = -F.log_softmax(view.logits, dim=1).mean(1).mean()
        return epsilon * (uniform - F.cross_entropy(view.logits, view.targets))

    return term


def augmenter(generator: torch.Generator) -> Callable[[torch.Tensor], torch.Tensor]:
    """Seeded horizontal flips and shifts of up to SHIFT pixels (zero-padded), per image."""

    def augment(x: torch.Tensor) -> torch.Tensor:
        n, _, h, w = x.shape
        flip = torch.rand(n, generator=generator) < 0.5
        dy, dx = (torch.randint(0, 2 * SHIFT + 1, (n,), generator=generator) for _ in range(2))
        x = torch.where(flip.to(x.device)[:, None, None, None], x.flip(3), x)
        padded = F.pad(x, (SHIFT, SHIFT, SHIFT, SHIFT))
        rows = (dy[:, None] + torch.arange(h)).to(x.device)  # n x h
        cols = (dx[:, None] + torch.arange(w)).to(x.device)  # n x w
        picked = padded[
            torch.arange(n, device=x.device)[:, None, None], :, rows[:, :, None], cols[:, None, :]
        ]
        return picked.permute(0, 3, 1, 2).contiguous()  # advanced indexing put channels last

    return augment


def masks_for(
    arm: str, model: nn.Module, k: int, seed: int, ratio: float, granularity: str, scope: AnchorScope = AnchorScope()
) -> list[AnchorMask | None]:
    """Each ingredient's anchor mask: none, one shared, or K independent at the same ratio, within
    `scope` (by default the classifier too: a fresh head is anchored at its random values)."""
    if arm == PLAIN or ratio == 0:
        return [None] * k
    within = scope.mask_options()
    if arm == SHARED:
        return [draw_mask(model, ratio, seed_for(seed, Stream.MASK, 0), granularity, **within)] * k
    return [draw_mask(model, ratio, seed_for(seed, Stream.MASK, 1, i), granularity, **within) for i in range(k)]


@dataclass
class SeedData:
    """What every arm of one seed shares: the start, the samples, the recipes, the probe."""

    seed: int
    model: nn.Module  # a skeleton, reloaded for each ingredient and measurement
    start: StateDict
    train: torch.Tensor  # training-set indices the ingredients train on
    held_out: EvalData
    test: EvalData
    recipes: list[Recipe]
    probe: Probe


def fine_tune(setup: SeedData, x: torch.Tensor, y: torch.Tensor, masks: Sequence[AnchorMask | None],
              spec: OptimizerSpec, batch_size: int) -> list[StateDict]:  # fmt: skip
    """Ingredient k from the start with recipe k and mask k; its draws are the same in every arm."""
    states = []
    for k, (recipe, mask) in enumerate(zip(setup.recipes, masks)):
        setup.model.load_state_dict(setup.start)
        order = torch_generator(setup.seed, Stream.DATA_ORDER, 0, k)
        augment = (
            augmenter(torch_generator(setup.seed, Stream.ANALYSIS, Draw.SOUP_AUGMENT, k))
            if recipe.augment
            else None
        )
        batches = minibatches(setup.train, batch_size, recipe.epochs, order)
        train_local(setup.model, x, y, batches, replace(spec, lr=recipe.lr), mask,
                    smoothing_term(recipe.label_smoothing), augment)  # fmt: skip
        states.append({n: t.detach().clone() for n, t in setup.model.state_dict().items()})
    return states


def greedy_soup(
    probe: Probe, states: Sequence[StateDict], held_out: EvalData, held_acc: Sequence[float]
) -> tuple[list[int], float]:
    """(the ingredients kept, the soup's held-out accuracy): in order of held-out accuracy, each
    kept only if the soup's held-out accuracy does not fall (Wortsman et al. 2022, Recipe 1)."""
    order = sorted(range(len(states)), key=lambda i: (-held_acc[i], i))
    kept, best = [order[0]], held_acc[order[0]]
    for i in order[1:]:
        _, acc = probe.measure(average_states([states[j] for j in kept + [i]]), [held_out])
        if acc >= best:
            kept, best = kept + [i], acc
    return kept, best


def pair_barriers(setup: SeedData, states: Sequence[StateDict], points: int) -> list[dict[str, Any]]:
    """Signed barriers of every pair of ingredients, on the test set, with ||A - B|| beside each."""
    pairs = []
    for i, j in itertools.combinations(range(len(states)), 2):
        curve = interpolation_curve(setup.probe, states[i], states[j], [setup.test], points)
        distance = parameter_distance(setup.probe.model, states[i], states[j])
        pairs.append({"ingredients": [i, j], **curve, **curve_barriers(curve), "distance": distance})
    return pairs


def soup_arm(setup: SeedData, states: Sequence[StateDict], points: int) -> dict[str, Any]:
    """Select on the held-out split, then measure every ingredient and soup on the test set."""
    probe, held, test = setup.probe, setup.held_out, setup.test
    held_figures = [probe.measure(s, [held]) for s in states]
    held_acc = [acc for _, acc in held_figures]
    kept, greedy_held = greedy_soup(probe, states, held, held_acc)
    best = max(range(len(states)), key=lambda i: (held_acc[i], -i))
    uniform = average_states(states)
    test_acc = [probe.measure(s, [test])[1] for s in states]
    uniform_acc = probe.measure(uniform, [test])[1]
    greedy_acc = probe.measure(average_states([states[i] for i in kept]), [test])[1]
    pairs = pair_barriers(setup, states, points)
    return {
        "held_out_acc": held_acc, "held_out_loss": [loss for loss, _ in held_figures],
        "uniform_held_out_acc": probe.measure(uniform, [held])[1], "greedy_held_out_acc": greedy_held,
        "greedy_kept": kept, "best_ingredient": best, "test_acc": test_acc,
        "uniform_acc": uniform_acc, "greedy_acc": greedy_acc, "best_acc": test_acc[best],
        "mean_ingredient_acc": sum(test_acc) / len(test_acc),
        "uniform_gain": uniform_acc - test_acc[best], "greedy_gain": greedy_acc - test_acc[best],
        "loss_barrier": sum(p["loss_barrier"] for p in pairs) / len(pairs),
        "acc_barrier": sum(p["acc_barrier"] for p in pairs) / len(pairs),
        "distance": sum(p["distance"] for p in pairs) / len(pairs),
        "ensemble_acc": probe.ensemble(states, [test])[1],  # the ceiling the soups are judged against
        "pairs": pairs,
    }  # fmt: skip


def run_arm(setup: SeedData, arm: str, data: tuple[torch.Tensor, torch.Tensor], spec: OptimizerSpec,
            batch_size: int, anchors: tuple[float, str, AnchorScope], points: int) -> dict[str, Any]:  # fmt: skip
    """Fine-tune one arm's K ingredients, anchored as `anchors` says (ratio, granularity, scope), and
    report their soups."""
    started = time.perf_counter()
    masks = masks_for(arm, setup.model, len(setup.recipes), setup.seed, *anchors)
    states = fine_tune(setup, *data, masks, spec, batch_size)
    return {"seed": setup.seed, "recipes": [asdict(r) for r in setup.recipes],  # each ingredient's recipe, in order
            **soup_arm(setup, states, points), "seconds": time.perf_counter() - started}  # fmt: skip


def compare_arms(per_arm: dict[str, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Every comparison of COMPARISONS on every metric, paired by seed; Holm within each metric."""
    from fedpfn.analysis.stats import adjust, paired

    found = []
    for (arm, base), metric in itertools.product(COMPARISONS, METRICS):
        values = {a: {r["seed"]: r[metric] for r in per_arm[a]} for a in (arm, base)}
        found.append(paired(f"{arm} − {base}", metric, values[arm], values[base], SPANS[metric]))
    adjust(found)
    return [asdict(p) for p in found]
