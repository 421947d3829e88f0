#!/usr/bin/env python
"""docs/alignment.md from the alignment gate's cells: every number and verdict on it is computed here.

    python scripts/alignment_page.py            # collect runs/alignment/*/seed*/lmc.json, then write the page
    python scripts/alignment_page.py --stored   # write the page from docs/alignment/cells.json alone

The cells (scripts/alignment_sweep.py) are kept, per seed and arm, as their figures in
docs/alignment/cells.json, so the page can be written again without the runs.

(a) asks, per regime, whether P(plain) > 0: the 95 % t interval of the mean over seeds must
exclude 0 (the exact sign test stands beside it). The positive control, P(diff-init), must move
in the same regime, or the regime's reading is void. (b) asks, where (a) found P(plain) > 0 on
at least B_SEEDS seeds, whether P(shared) is lower than P(independent) and than P(plain), paired
by seed, with Holm's adjustment over every (b) comparison the page computes.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from fedpfn.analysis.paired_text import p_number, p_text, verdict  # noqa: E402
from fedpfn.analysis.stats import Paired, adjust, mean_std, paired, sign_test  # noqa: E402
from fedpfn.core.files import atomic_write_bytes  # noqa: E402
from fedpfn.core.provenance import KEY, machines_sentence  # noqa: E402
from scripts.alignment_sweep import COMMON, OUT, REGIMES  # noqa: E402

CELLS = ROOT / "docs" / "alignment" / "cells.json"
PAGE = ROOT / "docs" / "alignment.md"
KEPT = ("loss_barrier", "loss_midpoint", "matched_loss_barrier", "permutation_loss", "moved_fraction",
        "fused_acc", "mean_individual_acc", "fusion_gap")  # fmt: skip
A_SEEDS, B_SEEDS = 5, 10  # seeds (a) and (b) need, set before the runs
SPANS = {"fusion_gap": 2.0}  # the largest difference of a figure between arms, where it is bounded (accuracies)


def collect() -> dict[str, Any]:
    """Every finished cell's figures by regime, seed and arm, with the settings they ran with."""
    cells: dict[str, Any] = {}
    for regime in REGIMES:
        for result in sorted((OUT / regime).glob("seed*/lmc.json")):
            data = json.loads(result.read_text())
            entry = cells.setdefault(regime, {"config": data["config"], "seeds": {}})
            entry.setdefault(KEY, {})[result.parent.name] = data.get(KEY)  # each cell's code and machine
            for arm, setting in data["settings"].items():
                for seed in setting["seeds"]:
                    figures = {key: seed[key] for key in KEPT}
                    entry["seeds"].setdefault(str(seed["seed"]), {})[arm] = figures
            entry["config"]["seeds"] = sorted(int(s) for s in entry["seeds"])
    return cells


def arms_of(regime: Mapping[str, Any]) -> list[str]:
    """The regime's arms in the gate's order: plain, shared, independent, diff-init (JSON keeps no order)."""
    kinds = ("plain", "shared", "independent", "diff-init")
    names = next(iter(regime["seeds"].values()))
    return sorted(names, key=lambda name: (next(i for i, k in enumerate(kinds) if name.startswith(k)), name))


def series(regime: Mapping[str, Any], arm: str, key: str) -> dict[int, float]:
    return {int(seed): arms[arm][key] for seed, arms in regime["seeds"].items() if arm in arms}


def interval_text(p: Paired) -> str:
    if p.low is None or p.high is None:
        return "n/a"
    return f"[{p.low:+.3f}, {p.high:+.3f}]"


def above_zero(p: Paired) -> bool:
    return p.low is not None and p.low > 0


def question_a(cells: Mapping[str, Any]) -> tuple[list[str], list[str], list[str]]:
    """The (a) table, the regimes where P(plain) > 0 with a positive control that moved, and a
    sentence per regime for the page's summary."""
    lines = [
        "| regime | seeds | P(plain), nats | 95 % CI | sign test p | units moved (plain) | loss barrier (plain) "
        "| matched barrier (plain) | P(diff-init): the positive control | reading |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    found, said = [], []
    for name, regime in cells.items():
        plain = paired("P(plain)", "P", series(regime, "plain", "permutation_loss"),
                       dict.fromkeys(series(regime, "plain", "permutation_loss"), 0.0))  # fmt: skip
        control = paired("P(diff-init)", "P", series(regime, "diff-init", "permutation_loss"),
                         dict.fromkeys(series(regime, "diff-init", "permutation_loss"), 0.0))  # fmt: skip
        moved = series(regime, "plain", "moved_fraction").values()
        barrier = series(regime, "plain", "loss_barrier").values()
        matched = series(regime, "plain", "matched_loss_barrier").values()
        reading = a_reading(plain, control, len(plain.seeds))
        if reading.startswith("P(plain) > 0"):
            found.append(name)
        sign = sign_test(plain.diffs)
        said.append(f"{name}: P(plain) {plain.mean:+.3f} nats, 95 % CI {interval_text(plain)} over "
                    f"{len(plain.seeds)} seeds; positive control {control.mean:+.3f}; {reading}.")  # fmt: skip
        lines.append(
            f"| {name} | {len(plain.seeds)} | {plain.mean:+.3f} | {interval_text(plain)} "
            f"| {'n/a' if sign is None else f'{sign:.3g}'} | {100 * sum(moved) / len(moved):.1f} % "
            f"| {sum(barrier) / len(barrier):+.3f} | {sum(matched) / len(matched):+.3f} "
            f"| {control.mean:+.3f} {interval_text(control)} | {reading} |"
        )
    return lines, found, said


def a_reading(plain: Paired, control: Paired, n: int) -> str:
    """What the interval supports, given that the positive control moved."""
    if not above_zero(control):
        return "void: the positive control's interval does not exclude 0, so the instrument did not move here"
    if n < A_SEEDS:
        return f"not yet read: {n} of the {A_SEEDS} seeds set before the runs"
    if above_zero(plain):
        return f"P(plain) > 0: the interval excludes 0 (and P below {plain.low:+.3f})"
    high = "n/a" if plain.high is None else f"{plain.high:+.3f}"
    return f"not shown: the interval excludes P(plain) above {high} nats"


def b_comparisons(cells: Mapping[str, Any], regimes: list[str], key: str) -> tuple[list[Paired], list[str]]:
    """P(shared) − P(independent) and P(shared) − P(plain) on figure `key`, in each regime with B_SEEDS seeds."""
    comparisons: list[Paired] = []
    waiting = []
    for name in regimes:
        regime = cells[name]
        shared = next(arm for arm in arms_of(regime) if arm.startswith("shared"))
        ours = series(regime, shared, key)
        if len(ours) < B_SEEDS:
            waiting.append(f"{name} ({len(ours)} of {B_SEEDS} seeds)")
            continue
        for base in (shared.replace("shared", "independent"), "plain"):
            theirs = series(regime, base, key)
            comparisons.append(paired(f"{name}: {shared} − {base}", key, ours, theirs, SPANS.get(key)))
    adjust(comparisons)  # one family per figure: every comparison here is on `key`
    return comparisons, waiting


def b_table(comparisons: list[Paired], scale: float, unit: str) -> list[str]:
    """One row per comparison, in `unit` (`scale` x the figure)."""
    lines = [f"| comparison | mean, {unit} | 95 % CI | p | p Holm | seeds lower | verdict |", "|---" * 7 + "|"]
    for p in comparisons:
        p_shown, holm_text = p_text(p, ".3g"), p_number(p.p_holm, ".3g")
        ci = "n/a" if p.low is None or p.high is None else f"[{scale * p.low:+.3f}, {scale * p.high:+.3f}]"
        lines.append(f"| {p.label} | {scale * p.mean:+.4f} | {ci} | {p_shown} | {holm_text} "
                     f"| {sum(d < 0 for d in p.diffs)} of {len(p.diffs)} | {verdict(p, scale, unit)} |")  # fmt: skip
    return lines


SECONDARY = (("loss_barrier", "loss barrier", 1.0, "nats"), ("matched_loss_barrier", "matched loss barrier", 1.0, "nats"),
             ("fusion_gap", "fusion gap (mean own accuracy − the average's)", 100.0, "points"))  # fmt: skip


def question_b(cells: Mapping[str, Any], regimes: list[str]) -> list[str]:
    """P comparisons where (a) found P(plain) > 0 (the family, Holm over every one computed), then
    the same comparisons on the barriers and the fusion gap (secondary, Holm within each figure)."""
    if not regimes:
        return ["No regime passed (a), so (b) has nothing to test here."]
    primary, waiting = b_comparisons(cells, regimes, "permutation_loss")
    tested = sum(p.p_value is not None for p in primary)
    lines = [f"P, in nats. Holm's adjustment across the {tested} comparisons tested (a difference is resolved "
             "when p Holm < 0.05; lower is what the paper's mechanism predicts)."]  # fmt: skip
    if primary:
        lines += ["", *b_table(primary, 1.0, "nats")]
    if waiting:
        lines += ["", f"Not yet answered, for want of seeds: {', '.join(waiting)}."]
    for key, title, scale, unit in SECONDARY:
        secondary, _ = b_comparisons(cells, regimes, key)
        if secondary:
            lines += ["", f"Secondary, {title} (Holm within this table):", "", *b_table(secondary, scale, unit)]
    return lines


def arms_table(cells: Mapping[str, Any]) -> list[str]:
    """Every arm of every regime: mean ± std over seeds of each figure."""
    shown = (("loss barrier", "loss_barrier", 1), ("midpoint − chord", "loss_midpoint", 1),
             ("matched barrier", "matched_loss_barrier", 1), ("P", "permutation_loss", 1),
             ("units moved, %", "moved_fraction", 100), ("fusion gap, points", "fusion_gap", 100))  # fmt: skip
    lines = ["| regime | arm | seeds | " + " | ".join(h for h, _, _ in shown) + " |", "|---" * (len(shown) + 3) + "|"]
    for name, regime in cells.items():
        for arm in arms_of(regime):
            cells_text = []
            for _, key, scale in shown:
                mean, std = mean_std([scale * v for v in series(regime, arm, key).values()])
                cells_text.append(f"{mean:+.3f}" + ("" if std is None else f" ± {std:.3f}"))  # no std from one seed
            lines.append(f"| {name} | {arm} | {len(series(regime, arm, 'loss_barrier'))} | " + " | ".join(cells_text) + " |")
    return lines


def regimes_table(cells: Mapping[str, Any]) -> list[str]:
    lines = ["| regime | flags (beside the common ones) |", "|---|---|"]
    return lines + [f"| {name} | `{' '.join(REGIMES[name])}` |" for name in cells]


INTRO = """# Alignment: where permutation misalignment exists from a shared start, and whether shared anchors remove it

Written by `python scripts/alignment_page.py` from the cells of `python scripts/alignment_sweep.py`
(their figures are kept in `docs/alignment/cells.json`; `--stored` writes the page from them alone).
Do not edit by hand. This page supersedes docs/lmc.md, whose loss barriers were clamped at 0.

## In short (computed from the cells)

{summary}

## The instrument, and how it was shown to move

Between two models A and B (`fedpfn/analysis/fusion.py`):

- **signed barrier**: the largest excess of the loss along (1 − a) A + a B over the chord between its
  ends, at the interior points only (11 points). Negative when the whole path beats its chord, as it
  does between label-skewed models on shared data; the midpoint's excess stands beside it.
- **where**: every figure names its data: the test set, each model's own held-out data, or (here)
  the union of the pair's held-out data (20 % of each model's training samples, never trained on).
- **π, a permutation that matching finds** (`fedpfn/analysis/matchers.py`; a permutation spec per
  model: MLP, CNN, VGG-11, ResNet-20's option-A residual streams, BatchNorm statistics moving with
  their channels and recomputed after matching), by one of four matchers, each figure under its
  matcher's name: `full`, weight matching on the full weights (Git Re-Basin Alg. 1); `masked`, the
  same with the coordinates identical in both models (such as shared anchors) left out, so that the
  identity does not win for free; `changes`, weight matching on the changes from the models' common
  start (A − w0 and B − w0; none for diff-init, whose models have no common start); `activation`,
  Git Re-Basin's activation matching (per permuted set of units, a layer's or a ResNet stage's
  stream, the correlations of the two models' units on the held-out inputs, one assignment each).
  Under π: the matched barrier, the fraction of units π moves, and the **permutation-attributable
  loss P = L(avg(A, B)) − L(avg(A, π(B)))** on the same data. P > 0: part of what averaging costs is a permutation that matching finds; P = 0 when π is
  the identity. A matcher finds a permutation, not necessarily the best one, so P is a lower bound
  on what a permutation could account for, and matchers can disagree. Every figure on this page was
  measured under `full` (the cells predate the other matchers); `python -m fedpfn.analysis.lmc
  --matchers full,masked,changes,activation` measures each.

It reads 0 where it must, and moves where it must (tests that can fail): a model against itself reads
0 everywhere, and π is the identity, under every matcher (`tests/test_matching.py`, `tests/test_matchers.py`,
`tests/test_lmc.py`); a copy with every hidden layer shuffled (BatchNorm included) has a large raw
barrier, a matched barrier of about 0, P equal to its barrier, and π undoes the shuffle bit for bit,
for every model with a permutation spec (the ViT has none) and every matcher (`tests/test_matching.py`,
`tests/test_matchers.py`); with 40 % of the coordinates identical in both models and the rest
shuffled, full matching keeps the identity where the masked matcher undoes the shuffle
(`tests/test_matchers.py`); a path that beats
its chord has a negative barrier (`tests/test_lmc.py`); two initialisations trained on the same data
have a barrier that matching lowers (`tests/test_matching.py`, and the diff-init arm in every cell below).

## Setting

Fashion-MNIST from Debian's `dataset-fashion-mnist` (the training split; a seeded subset per seed).
K = 2 models per seed from one start, in four arms: **plain**; **shared**: one anchor mask at ratio
0.4 (weight level) shared by both, entries fixed at the start's values (TNA-PFN); **independent**:
each model its own mask at the same ratio, the control that freezes as much and shares nothing;
**diff-init**: each model its own random initialisation, the positive control. The batch orders are
the same in every arm of a seed. Common flags: `{common}`.

{machines}

{regimes}

## (a) In which regime is P(plain) > 0 from a shared start?

Each regime's P(plain) over its seeds: mean, 95 % t interval, exact two-sided sign test. A regime is
read only where the positive control moved (its interval excludes 0); {a_seeds} seeds were set before
the runs.

{table_a}

## (b) There, is P(shared) lower than P(independent) and than P(plain)?

Paired by seed (the same start, data and batch orders), {b_seeds} seeds set before the runs.

{table_b}

## Every arm

Mean ± sample std over seeds; nats unless marked.

{table_arms}

## Commands

```
nice -n 10 python scripts/alignment_sweep.py --seeds 0-4     # every regime, 5 seeds (restartable)
python scripts/alignment_sweep.py --regime NAME --seeds 5-9  # more seeds where (b) needs them
python scripts/alignment_page.py                             # this page
```
"""


def machines(cells: Mapping[str, Any]) -> str:
    """Whether the cells came from one machine (cells kept before they recorded one: 'machine not recorded')."""
    found = [p for regime in cells.values() for p in (regime.get(KEY) or {"": None}).values()]
    return machines_sentence(found) or "Every cell ran on one machine with one set of libraries."


def write_page(cells: Mapping[str, Any]) -> str:
    table_a, found, said = question_a(cells)
    primary, _ = b_comparisons(cells, found, "permutation_loss")
    said += [f"{p.label}: P {p.mean:+.4f} nats, 95 % CI {interval_text(p)}, p Holm "
             f"{p_number(p.p_holm, '.2g')}: {verdict(p, 1.0, 'nats')}." for p in primary]  # fmt: skip
    return INTRO.format(
        summary="\n".join(f"- {line}" for line in said),
        machines=machines(cells), common=" ".join(COMMON), regimes="\n".join(regimes_table(cells)), a_seeds=A_SEEDS, b_seeds=B_SEEDS,
        table_a="\n".join(table_a), table_b="\n".join(question_b(cells, found)),
        table_arms="\n".join(arms_table(cells)),
    )  # fmt: skip


def stored_cells() -> dict[str, Any]:
    """docs/alignment/cells.json, kept with sorted keys: its regimes back in the sweep's order."""
    stored = json.loads(CELLS.read_text())
    return {name: stored[name] for name in [*REGIMES, *sorted(stored)] if name in stored}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--stored", action="store_true", help="write the page from docs/alignment/cells.json alone")
    args = parser.parse_args(argv)
    if args.stored:
        cells = stored_cells()
    else:
        cells = collect()
        if not cells:
            print(f"error: no finished cell under {OUT}; run scripts/alignment_sweep.py first", file=sys.stderr)
            return 2
        CELLS.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(CELLS, (json.dumps(cells, indent=1, sort_keys=True) + "\n").encode())
    atomic_write_bytes(PAGE, write_page(cells).encode())
    print(f"wrote {PAGE.relative_to(ROOT)} from {sum(len(c['seeds']) for c in cells.values())} cells")
    return 0


if __name__ == "__main__":
    sys.exit(main())
