"""The alignment gate's reading: docs/alignment.md's tables and sentences from its cells.

Cells are kept as regime -> {"config", "seeds": seed -> arm -> figures, "provenance"}; the figures
of a matcher other than `full` sit under the arm's "matchers" (cells kept before the matchers
existed have none, and are read under `full` alone).

(a) asks, per regime, whether P(plain) > 0: the 95 % t interval over seeds must exclude 0, and
the positive control (diff-init) must move in the same regime, or the reading is void. (b) splits,
where (a) found P(plain) > 0 on B_SEEDS seeds, what shared anchors change into freezing and sharing
(`fedpfn.analysis.decompose`) on three co-primary endpoints: P, the fused model's accuracy and the
fusion gap. Each regime is its own Holm family (its 3 endpoints x whole, freezing, sharing), declared
before its runs, so a regime added later never re-adjusts a published p-value.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from fedpfn.analysis.decompose import PARTS, Split, split
from fedpfn.analysis.inference import adjust_together
from fedpfn.analysis.markup import code, inline, table
from fedpfn.experiments.lmc_render import DIVERGED
from fedpfn.analysis.paired_text import VERDICT_KEY, no_test, p_number, p_text, verdict, verdict_cell
from fedpfn.analysis.plots import PairedSeries
from fedpfn.analysis.render import series_of
from fedpfn.analysis.stats import Paired, mean_std, paired, sign_test
from fedpfn.core.arms import GATE
from fedpfn.core.provenance import KEY, NOT_RECORDED, machine_of

A_SEEDS, B_SEEDS = 5, 10  # seeds (a) and (b) need, set before the runs
MATCHERS = ("full", "masked", "changes", "activation")
ENDPOINTS = (("permutation_loss", "P", 1.0, "nats"), ("fused_acc", "fused accuracy", 100.0, "points"),
             ("fusion_gap", "fusion gap", 100.0, "points"))  # fmt: skip
SPANS = {"fused_acc": 1.0, "fusion_gap": 2.0}  # the largest difference of a figure between arms, where bounded
Cells = Mapping[str, Any]


def arms_of(regime: Cells) -> list[str]:
    """The regime's arms in the gate's order: plain, shared, independent, diff-init (JSON keeps no order)."""
    names = next(iter(regime["seeds"].values()))
    return sorted(names, key=lambda name: (next(i for i, k in enumerate(GATE) if name.startswith(k)), name))


def arm_named(regime: Cells, kind: str) -> str:
    return next(arm for arm in arms_of(regime) if arm.startswith(kind))


def series(regime: Cells, arm: str, key: str, matcher: str = "full") -> dict[int, float]:
    """`key` of `arm` per seed, under `matcher` (seeds whose cell lacks it are left out)."""
    found = {}
    for seed, arms in regime["seeds"].items():
        figures = arms.get(arm, {})
        if matcher != "full":
            figures = figures.get("matchers", {}).get(matcher, {})
        if key in figures:
            found[int(seed)] = figures[key]
    return found


def diverged(regime: Cells, arm: str) -> list[int]:
    """The seeds whose `arm` diverged (`python -m fedpfn.experiments.lmc` records which model, at which lr)."""
    return sorted(int(seed) for seed, arms in regime["seeds"].items() if DIVERGED in arms.get(arm, {}))


def matchers_in(regime: Cells) -> list[str]:
    """The matchers every seed of the regime's plain arm was measured under."""
    plain = [arms.get("plain", {}) for arms in regime["seeds"].values()]
    return [m for m in MATCHERS if m == "full" or all(m in f.get("matchers", {}) for f in plain)]


def interval_text(p: Paired, scale: float = 1.0, digits: int = 3) -> str:
    return "n/a" if p.low is None or p.high is None else f"[{scale * p.low:+.{digits}f}, {scale * p.high:+.{digits}f}]"


def above_zero(p: Paired) -> bool:
    return p.low is not None and p.low > 0


def against_zero(label: str, values: Mapping[int, float]) -> Paired:
    return paired(label, "P", values, dict.fromkeys(values, 0.0))


def a_reading(plain: Paired, control: Paired, n: int, lost: Sequence[int] = ()) -> str:
    """What the interval supports, given that the plain models trained (`lost`: seeds where one diverged)
    and that the positive control moved."""
    if lost:
        seeds = ", ".join(map(str, lost))
        return f"void: a plain model diverged in seed{'s' * (len(lost) > 1)} {seeds}, so this regime does not train at its lr"
    if n < A_SEEDS:  # before the control: too few seeds for its interval is not an instrument that did not move
        return f"not yet read: {n} of the {A_SEEDS} seeds set before the runs"
    if not above_zero(control):
        return "void: the positive control's interval does not exclude 0, so the instrument did not move here"
    if above_zero(plain):
        return f"P(plain) > 0: the interval excludes 0 (and P below {plain.low:+.3f})"
    if plain.high is None:  # no spread: every seed read the same P (matching kept the identity: 0)
        return f"not shown: {no_test(plain, 1.0, 'nats')}"
    return f"not shown: the interval excludes P(plain) above {plain.high:+.3f} nats"


def a_cell(reading: str) -> str:
    """A reading in (a)'s table: its first words (what they mean is said once, `A_KEY`)."""
    return reading.split(":")[0] + (" (no test)" if "no test" in reading else "")


A_KEY = (f"Reading: *P(plain) > 0* where the interval excludes 0; *not shown* where it does not, its 95 % CI being "
         "what it rules out (*no test* where every seed read the same P); *void* where the positive control's "
         "interval does not exclude 0 (the instrument did not move) or a plain model diverged (the regimes' table "
         f"says in which seed); *not yet read* below the {A_SEEDS} seeds set before the runs.")  # fmt: skip


def question_a(cells: Cells) -> tuple[list[str], list[str], list[str]]:
    """The (a) table under every matcher a regime has, the regimes where P(plain) > 0 under `full`
    with a control that moved, and a sentence per regime and matcher for the page's summary."""
    lines = table(["regime", "matcher", "seeds", "P(plain), nats", "95 % CI", "sign test p", "units moved (plain)",
                   "P(diff-init): the positive control", "reading"])  # fmt: skip
    found, said = [], []
    for name, regime in cells.items():
        for matcher in matchers_in(regime):
            plain = against_zero("P(plain)", series(regime, "plain", "permutation_loss", matcher))
            by = "full" if matcher == "changes" else matcher  # diff-init has no common start: full's control
            control = against_zero("P(diff-init)", series(regime, "diff-init", "permutation_loss", by))
            moved = list(series(regime, "plain", "moved_fraction", matcher).values())
            reading = a_reading(plain, control, len(plain.seeds), diverged(regime, "plain"))
            if matcher == "full" and reading.startswith("P(plain) > 0"):
                found.append(name)
            said.append(f"{name}, {matcher}: P(plain) {plain.mean:+.3f} nats, 95 % CI {interval_text(plain)} "
                        f"over {len(plain.seeds)} seeds; {reading}.")  # fmt: skip
            lines.append(
                f"| {name} | {matcher} | {len(plain.seeds)} | {plain.mean:+.3f} | {interval_text(plain)} "
                f"| {p_number(sign_test(plain.diffs), '.3g')} | {100 * sum(moved) / max(len(moved), 1):.1f} % "
                f"| {control.mean:+.3f} {interval_text(control)} | {a_cell(reading)} |"
            )
    return [*lines, "", A_KEY], found, said


def regime_splits(name: str, regime: Cells, matcher: str = "full") -> list[Split]:
    """The three co-primary endpoints' splits (P alone under a matcher other than full)."""
    arms = {kind: arm_named(regime, kind) for kind in ("plain", "independent", "shared")}
    endpoints = ENDPOINTS if matcher == "full" else ENDPOINTS[:1]
    return [
        split(f"{name}, {title}" + ("" if matcher == "full" else f" ({matcher})"), key,
              *(series(regime, arms[k], key, matcher if key == "permutation_loss" else "full")
                for k in ("plain", "independent", "shared")), SPANS.get(key))  # fmt: skip
        for key, title, _, _ in endpoints
    ]


def split_table(splits: Sequence[Split]) -> list[str]:
    """One row per endpoint and part: mean, interval, p, Holm p (set by the caller), share of the whole."""
    lines = table(["endpoint: part", "mean", "95 % CI", "p", "p Holm", "share of the whole", "verdict"])
    for found in splits:
        scale, unit = next((s, u) for key, _, s, u in ENDPOINTS if key == found.metric)
        for part_name, p in zip(PARTS, found.parts):
            lines.append(
                f"| {p.label} | {scale * p.mean:+.4f} {unit} | {interval_text(p, scale)} | {p_text(p, '.3g')} "
                f"| {p_number(p.p_holm, '.3g')} | {found.share_text(p)} "
                f"| {verdict_cell(p, scale, unit)} |"
            )
    return lines


def question_b(cells: Cells, regimes: Sequence[str]) -> tuple[list[str], list[str]]:
    """(b)'s tables, each regime its own family, and a summary sentence per part of P."""
    if not regimes:
        return ["No regime passed (a), so (b) has nothing to test here."], []
    lines: list[str] = []
    said: list[str] = []
    for name in regimes:
        regime = cells[name]
        n = len(series(regime, arm_named(regime, "shared"), "permutation_loss"))
        if n < B_SEEDS:
            lines += ["", f"{name}: not yet answered, {n} of the {B_SEEDS} seeds set before the runs."]
            continue
        splits = regime_splits(name, regime)
        tested = adjust_together(p for s in splits for p in s.parts)
        lines += ["", f"**{name}**: one Holm family of the {tested} tests below.", "", *split_table(splits)]
        said += [f"{p.label}: {p.mean:+.4f} nats, 95 % CI {interval_text(p)}, p Holm {p_number(p.p_holm, '.2g')}: "
                 f"{verdict(p, 1.0, 'nats').split(';')[0]}." for p in splits[0].parts[1:]]  # fmt: skip
        by_matcher = {"full": splits[0]}
        for matcher in matchers_in(regime)[1:]:
            other = regime_splits(name, regime, matcher)
            adjust_together(other[0].parts)
            by_matcher[matcher] = other[0]
            lines += ["", f"{name}, P under `{matcher}` (secondary; Holm within these 3):", "", *split_table(other)]
        if len(by_matcher) > 1:
            said.append(matchers_sentence(name, by_matcher))
    return [*lines, "", VERDICT_KEY], said  # what a verdict cell's words mean, once for (b)'s tables


def in_short(cells: Cells, found: Sequence[str], said: Sequence[str], said_b: Sequence[str]) -> list[str]:
    """The page in short, for its top: (a)'s answer under `full` (the regimes where P(plain) > 0, each
    with its interval, as (a)'s table reads them) and (b)'s parts of P there, as (b)'s tables read them."""
    full = {name: line for name in cells for line in said if line.startswith(f"{name}, full: ")}
    others: dict[str, list[str]] = {}  # each other regime under its reading's words, as (a)'s table reads it
    for name, line in full.items():
        if name not in found:
            others.setdefault(a_cell(line.split(" seeds; ", 1)[1]), []).append(name)
    rest = "; ".join(f"*{words}* in {', '.join(names)}" for words, names in others.items())
    lines = ["**(a) In which regime is P(plain) > 0 from a shared start?** Under `full` matching, with a positive "
             f"control that moved, in {len(found)} of the {len(cells)} regimes run:", "",
             *(f"- {full[name]}" for name in found), "",
             f"The others under `full`: {rest or 'none'}; (a)'s table below gives every regime under every matcher, "
             "and says what its words mean.", "",
             "**(b) There, do shared anchors lower P, and is it freezing or sharing?** Each regime's parts of P "
             "under `full` (its own Holm family), and sharing's share under every matcher:", ""]  # fmt: skip
    return [*lines, *(f"- {line}" for line in said_b)] if said_b else [*lines, "- none tested yet."]


def word(p: Paired) -> str:
    """A verdict's first word: higher, lower, not resolved, or no test."""
    return verdict(p, 1.0, "nats").split(";")[0].split(" after Holm")[0]


def matchers_sentence(name: str, by_matcher: Mapping[str, Split]) -> str:
    """Sharing's share of P's drop under each matcher, and whether the matchers' verdicts agree."""
    shares = []
    for matcher, found in by_matcher.items():
        shares.append(f"{matcher} {found.share_text(found.sharing)} ({word(found.sharing)})")
    verdicts = {(word(f.freezing), word(f.sharing)) for f in by_matcher.values()}
    agree = "the matchers agree on both parts' verdicts" if len(verdicts) == 1 else (
        "the matchers disagree on the parts' verdicts")  # fmt: skip
    return f"{name}: sharing's share of the drop in P, by matcher: {', '.join(shares)}; {agree}."


SHOWN = (("loss barrier", "loss_barrier", 1), ("midpoint − chord", "loss_midpoint", 1),
         ("REPAIRed barrier", "repair_loss_barrier", 1), ("train-data barrier", "train_loss_barrier", 1),
         ("matched barrier", "matched_loss_barrier", 1), ("P", "permutation_loss", 1),
         ("units moved, %", "moved_fraction", 100), ("‖A − B‖", "distance", 1),
         ("own accuracy, %", "mean_individual_acc", 100), ("fused accuracy, %", "fused_acc", 100),
         ("ensemble accuracy, %", "ensemble_acc", 100), ("fusion gap, points", "fusion_gap", 100))  # fmt: skip


def spread_text(values: Sequence[float]) -> str:
    if not values:
        return "n/a"
    mean, std = mean_std(values)
    return f"{mean:+.3f}" + ("" if std is None else f" ± {std:.3f}")  # no std from one seed


def arms_table(cells: Cells) -> list[str]:
    """Every arm of every regime: mean ± std over seeds of each figure ('n/a' where its cells predate it)."""
    rows = [[name, inline(arm), len(series(regime, arm, "loss_barrier")),
             *(spread_text([scale * v for v in series(regime, arm, key).values()]) for _, key, scale in SHOWN)]
            for name, regime in cells.items() for arm in arms_of(regime)]  # fmt: skip
    return table(["regime", "arm", "seeds", *(h for h, _, _ in SHOWN)], rows)


def regimes_table(cells: Cells, regimes: Mapping[str, Sequence[str]], why_not: Mapping[str, str]) -> list[str]:
    """Every regime the sweep defines: its seeds run and the arms that diverged in some, or why it has not run."""
    lines = table(["regime", "seeds run", "flags (beside the common ones)"])
    for name, flags in regimes.items():
        seeds = sorted(int(s) for s in cells[name]["seeds"]) if name in cells else []
        ran = f"{len(seeds)} ({seeds[0]}-{seeds[-1]})" if seeds else f"not run: {why_not.get(name, 'not yet')}"
        lost = [f"{inline(arm)} diverged in seed(s) {', '.join(map(str, diverged(cells[name], arm)))}"
                for arm in (arms_of(cells[name]) if seeds else []) if diverged(cells[name], arm)]  # fmt: skip
        lines.append(f"| {name} | {'; '.join([ran, *lost])} | {code(' '.join(flags))} |")
    return lines


STEP = ("cnn-same-init-lr0.06", "cnn-same-init")  # plain at the anchored arms' free 60 % of the step; the anchored arms
STEP_ENDPOINTS = (("permutation_loss", "P", 1.0, "nats"), ("mean_individual_acc", "own accuracy", 100.0, "points"),
                  ("fused_acc", "fused accuracy", 100.0, "points"))  # fmt: skip


def machine_by_seed(regime: Cells) -> dict[int, str]:
    """Each seed's machine and libraries (`machine_of`), from the provenance a regime keeps per cell
    folder (`{arm}/seed{seed}`: "seed3"); NOT_RECORDED for a seed whose cell kept none."""
    kept = {int(m.group(1)): machine_of(p) for folder, p in (regime.get(KEY) or {}).items()
            if (m := re.fullmatch(r"seed(\d+)", folder))}  # fmt: skip
    return {int(seed): kept.get(int(seed), NOT_RECORDED) for seed in regime["seeds"]}


def one_machine(anchored: Cells, smaller: Cells) -> tuple[list[int], list[str]]:
    """The seeds both regimes ran whose two cells ran on one recorded machine with one set of
    libraries (a seed fixes the start, data and batch order, not a machine's kernels), and why the
    others are dropped: one reason a kind, with its seeds."""
    ours, theirs = machine_by_seed(anchored), machine_by_seed(smaller)
    both = sorted(set(ours) & set(theirs))
    kept = [s for s in both if ours[s] == theirs[s] != NOT_RECORDED]
    unrecorded = [s for s in both if NOT_RECORDED in (ours[s], theirs[s])]
    other = [s for s in both if s not in kept and s not in unrecorded]
    silent = " and ".join(name for name, found in zip(STEP[::-1], (ours, theirs))
                          if any(found[s] == NOT_RECORDED for s in unrecorded))  # fmt: skip
    why = [f"{len(seeds)} ({', '.join(map(str, seeds))}) {reason}" for seeds, reason in (
        (unrecorded, f"where a cell of {silent} recorded no machine (kept before cells carried their provenance)"),
        (other, "where the two cells ran on different machines or library sets")) if seeds]  # fmt: skip
    return kept, why


def paired_note(kept: Sequence[int], why: Sequence[str], ran: int) -> str:
    """What the step control pairs: the seeds kept of those both regimes ran, and each reason a seed was dropped."""
    if not kept:
        return f"Not read: no seed ran both regimes on one machine. Of the {ran} seeds both ran, dropped: {'; '.join(why)}."
    dropped = f"; dropped: {'; '.join(why)}" if why else ""
    return f"Paired within one machine: {len(kept)} of the {ran} seeds both regimes ran{dropped}."


def step_control(cells: Cells) -> list[str]:
    """Is anchoring a smaller step? Each anchored arm at lr 0.1 minus plain at lr 0.06, seed by seed (a seed
    fixes the start, the data and the batch order in every regime) on the seeds whose two cells ran on
    one machine (`one_machine`): P, own and fused accuracy, one Holm family."""
    smaller, anchored = (cells.get(name) for name in STEP)
    if smaller is None or anchored is None:
        return [f"Not yet read: it needs the cells of {STEP[0]} and {STEP[1]}."]
    plain = arm_named(smaller, "plain")
    kept, why = one_machine(anchored, smaller)
    note = paired_note(kept, why, len(set(anchored["seeds"]) & set(smaller["seeds"])))
    if not kept:
        return [note]

    def both(arm: str, key: str, title: str) -> Paired:  # on the seeds kept that both regimes measured
        ours, theirs = series(anchored, arm, key), series(smaller, plain, key)
        common = {seed: value for seed, value in ours.items() if seed in theirs and seed in kept}
        return paired(f"{arm} at lr 0.1 − plain at lr 0.06: {title}", key, common, theirs, SPANS.get(key))

    found = [(key, scale, unit, both(arm, key, title))
             for arm in (arm_named(anchored, "shared"), arm_named(anchored, "independent"))
             for key, title, scale, unit in STEP_ENDPOINTS]  # fmt: skip
    tested = adjust_together(p for *_, p in found)
    lines = [note, "", f"One Holm family of the {tested} tests below.", "",
             *table(["comparison", "seeds", "mean", "95 % CI", "p", "p Holm", "verdict"])]
    for _, scale, unit, p in found:
        lines.append(f"| {p.label} | {len(p.seeds)} | {scale * p.mean:+.4f} {unit} | {interval_text(p, scale)} "
                     f"| {p_text(p, '.3g')} | {p_number(p.p_holm, '.3g')} | {verdict_cell(p, scale, unit)} |")  # fmt: skip
    return [*lines, "", VERDICT_KEY]


FIGURE_PANELS = ("P(plain), against 0", "freezing: independent − plain", "sharing: shared − independent")


def figure_panels(cells: Cells) -> dict[str, list[PairedSeries]]:
    """P under `full` per regime, seed by seed, as the gate's figure draws it: P(plain) against 0
    ((a)), and shared anchors' freezing and sharing parts ((b)'s split, read here in every regime
    with two seeds or more, whether or not (a) passed: the page's tables say which are tested)."""
    panels: dict[str, list[PairedSeries]] = {title: [] for title in FIGURE_PANELS}
    for name, regime in cells.items():
        plain = against_zero(name, series(regime, "plain", "permutation_loss"))
        if len(plain.seeds) < 2:
            continue
        parts = regime_splits(name, regime)[0]
        for title, p in zip(FIGURE_PANELS, (plain, parts.freezing, parts.sharing)):
            panels[title].append(series_of(p, 1.0)._replace(label=f"{name} ({len(p.seeds)})"))
    return panels
