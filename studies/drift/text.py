"""The drift study's results as docs/results.md reads them, from stored numbers only: the
reports' JSON (fedpfn.analysis.report) and what studies.drift.readings kept of the runs
(docs/study/drift-<model>-page.json). Every sentence is computed here, never typed in; the
arms, skews, learning rates, reports and names are the study file's (`Design`), so each is shown
as typed (fedpfn.analysis.markup): the names escaped in `Design`, a skew, a chosen rate and a
comparison's label where they are written; a family's heading is the page's Markdown, as its template is.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from fedpfn.analysis.inference import decided, recompute
from fedpfn.analysis.markup import inline, table, table_row
from fedpfn.analysis.paired_text import VERDICT_KEY, floors_text, p_number, p_text, verdict, verdict_cell
from fedpfn.analysis.stats import ACCURACY_SPAN, ALPHA, Paired, adjust, sign_test, std_factors

ALIGNMENT = ("align_loss_barrier", "align_fusion_gap")
SPANS = {"align_fusion_gap": 2.0}  # the largest difference between arms (a gap of accuracies); a loss has none
ACC_BARRIER = "align_acc_barrier"
BARRIERS = ("align_loss_barrier", ACC_BARRIER)  # what the clamped instrument could not read below 0
CLAMPED = (
    "in these runs it was clamped at 0 by construction: the instrument took the largest excess of the curve over "
    "the chord on a grid of points that includes both end points, where the excess is 0, so it could not read "
    "below 0; and it measured on the server's test set, where between label-skewed clients the midpoint beats "
    "the chord (each end point is poor on the other's classes). This 0 describes the instrument, not the "
    "models: it says nothing about their alignment, and its comparisons below have no test."
)
TWINS = {"fedpfn", "fedpnu-weight"}  # equal under FedAvg by construction
TWINS_WHY = (
    "This is by construction under FedAvg: the anchored weights FedPNU does not upload are filled with the global "
    "values, which is what FedPFN's frozen anchors average to; the two differ in upload only. So FedPNU weight's "
    "accuracy is FedPFN's again, not a second finding."
)


@dataclass(frozen=True)
class Design:
    """The study file's parts the page reads: its skews, arms (the first the baseline), learning
    rates, reports (name -> its arms, the first the baseline; its heading) and display names."""

    alphas: tuple[str, ...]
    arms: tuple[str, ...]
    lrs: tuple[str, ...]
    reports: dict[str, tuple[list[str], str]]
    names: dict[str, str]
    model: str
    lead: str  # how the page was made and is made again, before what it read from


@dataclass
class Row:
    """One comparison of a family: its name, its test and verdict; the primary's final round beside."""

    name: str
    test: Paired
    verdict: str
    final: Paired | None = None


def comparison(d: Design, result: dict[str, Any], arm: str, name: str, metric: str) -> Paired:
    """The report's comparison of `arm` (a report's arm) against its baseline on `metric`, tested
    again from its stored differences by today's rule (Holm within the report)."""
    label = result["arms"][d.reports[name][0].index(arm)]["arm"]
    stored = [recompute(p, ACCURACY_SPAN) for p in result["paired"] if p["metric"] == metric]
    adjust(stored)
    return next(p for p in stored if p.label == label)


def scale_of(name: str) -> tuple[float, str]:
    """Accuracy figures in points (100 × a fraction); a loss barrier as it is, in nats."""
    return (1.0, "nats") if "loss_barrier" in name else (100.0, "points")


def figure_of(name: str) -> str:
    """The alignment figure (metrics key) a comparison's name is about."""
    return next(key for key in (*ALIGNMENT, ACC_BARRIER) if key.removeprefix("align_") in name)


def primary_family(d: Design, reports: dict[str, dict[str, dict]]) -> list[Row]:
    """FedPFN − FedAvg and FedPFN − control at both skews, their p Holm-adjusted across the four;
    each with its final-round comparison (Holm within its report)."""
    family = {}
    for alpha in d.alphas:
        for base, name in (("FedAvg", "all"), ("control", "control")):
            found = reports[alpha][name]
            label = f"α={alpha}: FedPFN − {base}"
            family[label] = [dataclasses.replace(comparison(d, found, "fedpfn", name, m), label=label) for m in ("lastk", "final")]
    adjust(lastk for lastk, _ in family.values())
    return [Row(label, lastk, verdict(lastk), final) for label, (lastk, final) in family.items()]


def alignment_rows(data: dict[str, Any]) -> list[Row]:
    """The stored alignment family, tested again from its differences (Holm across it); a figure 0
    in every measurement says so in its verdict."""
    rows = []
    tests = [recompute(stored, SPANS.get(figure_of(stored["label"]))) for stored in data["alignment"]]
    adjust(tests)
    for test in tests:
        key = figure_of(test.label)
        said = verdict(test, *scale_of(test.label))
        if key in data["always_zero"] and test.p_value is None:
            said = "no test: 0 in every measurement" + (", clamped by construction" if clamps(data, key) else "")
        rows.append(Row(test.label, test, said))
    return rows


def clamps(data: dict[str, Any], key: str) -> bool:
    return bool(data["clamped"]) and key in BARRIERS


def summary(primary: list[Row]) -> list[str]:
    """The page in short, for its top: the pre-registered primary family, a line each with the
    difference, its 95 % interval and the verdict; the Answers and tables below give the detail."""
    lines = [f"**In short.** The pre-registered primary family (test accuracy over the last 10 rounds, FedPFN "
             f"paired with each arm over {len(primary[0].test.seeds)} seeds, Holm {holm_span(primary)}; the "
             "[answers](#answers) and tables below give the detail):", ""]  # fmt: skip
    for row in primary:
        test = row.test
        ci = "" if test.low is None or test.high is None else f" [{100 * test.low:+.2f}, {100 * test.high:+.2f}]"
        lines.append(f"- {inline(row.name)}: {100 * test.mean:+.2f} points{ci}: {row.verdict.split(';')[0]}")
    return lines


def holm_span(rows: list[Row]) -> str:
    """'across the 4' or 'across the 4 of these 8 that have a test': the family as Holm counted it."""
    tested = sum(row.test.p_value is not None for row in rows)
    return f"across the {tested}" + ("" if tested == len(rows) else f" of these {len(rows)} that have a test")


def primary_answer(row: Row) -> str:
    """A primary comparison: the t test beside the exact sign test, its verdict, and its final round."""
    test, final, seeds = row.test, row.final, len(row.test.seeds)
    assert final is not None
    tests = [] if test.p_value is None else [f"t test p {p_text(test, '.4f')}, Holm {p_number(test.p_holm, '.4f')}"]
    sign = sign_test(test.diffs)
    tests += [] if sign is None else [f"exact sign test, {test.wins} of {seeds} seeds higher: p {sign:.4f}"]
    text = f"{inline(row.name)} {100 * test.mean:+.3f} points ({'; '.join(tests)}): {row.verdict}"
    if decided(test) and sign is not None and sign >= ALPHA:
        least = sign_test([1.0] * seeds)
        text += f", on the t test alone: the exact sign test cannot go below {least:.4f} with {seeds} seeds"
    held = decided(final) and (final.mean > 0) == (test.mean > 0)
    lead = "; in the final round it is absent:" if decided(test) and not held else "; final round:"
    p = "" if final.p_value is None else f", p {p_text(final)}"
    return f"{text}{lead} {100 * final.mean:+.2f} points{p} ({final.wins} of {seeds} seeds higher)"


def as_much(d: Design, reports: dict[str, dict[str, dict]], primary: list[Row], alpha: str) -> str:
    """Where FedPFN beats FedAvg but not the control: how much the control gains over FedAvg."""
    rows = {row.name.split(": ", 1)[1]: row for row in primary if row.name.startswith(f"α={alpha}:")}
    ours, control = rows["FedPFN − FedAvg"].test, rows["FedPFN − control"].test
    if not (decided(ours) and ours.mean > 0) or decided(control):
        return ""
    theirs = comparison(d, reports[alpha]["all"], "fedpfn-client", "all", "lastk")
    return (f" At α={inline(alpha)} the control gains as much over FedAvg ({100 * theirs.mean:+.2f} points, "
            f"{theirs.wins} of {len(theirs.seeds)} seeds higher) as FedPFN ({100 * ours.mean:+.2f}): FedPFN − control "
            f"is {100 * control.mean:+.2f}, so the gain is not shown to come from sharing.")  # fmt: skip


def answers(d: Design, primary: list[Row], alignment: list[Row], reports: dict[str, dict[str, dict]], data: dict) -> list[str]:
    """The pre-registered questions, each answered by its comparisons (nothing else)."""

    def said(rows: list[Row], needle: str) -> str:
        parts = []
        for row in (r for r in rows if needle in r.name):
            key = figure_of(row.name)
            if key in data["always_zero"] and clamps(data, key):
                parts.append(f"{inline(row.name)}: no reading, clamped at 0 by construction in these runs (see Observations)")
            else:
                scale, unit = scale_of(row.name)
                parts.append(f"{inline(row.name)} {scale * row.test.mean:+.3f} {unit}: {row.verdict}")
        return "; ".join(parts)

    pfn = [primary_answer(row) for row in primary if "FedAvg" in row.name]
    control = [primary_answer(row) for row in primary if "control" in row.name]
    return [
        f"1. FedPFN against FedAvg — {'; '.join(pfn)}.",
        f"2. FedPFN against the control (as much freezing, nothing shared) — {'; '.join(control)}."
        + "".join(as_much(d, reports, primary, alpha) for alpha in d.alphas),
        f"3. Misalignment, FedPFN against FedAvg — {said(alignment, 'FedAvg')}.",
        f"   FedPFN against the control — {said(alignment, 'control')}.",
    ]


def final_round(d: Design, result: dict[str, Any], alpha: str) -> str:
    """Every arm against FedAvg in the final round at one skew, led by the arms that upload as much."""
    arms = result["arms"]
    found = [(arm, comparison(d, result, arm, "all", "final"), arms[i]["mb_up_total"] == arms[0]["mb_up_total"])
             for i, arm in enumerate(d.reports["all"][0]) if i]  # fmt: skip
    full = [(arm, c) for arm, c, same in found if same]
    means, wins = [100 * c.mean for _, c in full], sorted({c.wins for _, c in full})
    seeds = len(full[0][1].seeds) if full else 0
    names = ", ".join(d.names[arm] for arm, _ in full)
    if full and (all(m < 0 for m in means) or all(m > 0 for m in means)):
        higher = f"{wins[0]}{'' if len(wins) == 1 else f' to {wins[-1]}'} of {seeds} seeds higher"
        higher += " in each" if len(wins) == 1 else ""
        word, ends = ("lower", (max(means), min(means))) if means[0] < 0 else ("higher", (min(means), max(means)))
        lead = (f"every arm that uploads as much as FedAvg ({names}) is {word} "
                f"({ends[0]:+.2f} to {ends[1]:+.2f} points; {higher})")  # fmt: skip
    else:
        lead = f"the arms that upload as much as FedAvg ({names}) differ in sign"
    each = "; ".join(f"{d.names[arm]} {100 * c.mean:+.2f} ({c.wins} of {len(c.seeds)} higher, {verdict(c)})"
                     for arm, c, _ in found)  # fmt: skip
    return f"- α={inline(alpha)}: {lead}. Each arm − FedAvg: {each}."  # fmt: skip


def observations(d: Design, data: dict[str, Any]) -> list[str]:
    """What the runs show that the pre-registration did not foresee, computed, never typed in."""
    lines = []
    for key, count in data["always_zero"].items():
        line = (f"- The {key.removeprefix('align_').replace('_', ' ')} was 0 in all {count} measurements, in every arm at "
                "both skews. A figure that is 0 in every measurement is a question about the instrument before it "
                "is one about the models")  # fmt: skip
        lines.append(f"{line}: {CLAMPED}" if clamps(data, key) else f"{line}: can it read anything else?")
    acc = data["acc_barrier"]
    if acc:
        how = ", clamped at 0 the same way" if clamps(data, ACC_BARRIER) else ""
        lines.append(f"- The accuracy barrier (measured, not pre-registered{how}) averaged {100 * acc['mean']:.2f} points "
                     f"over its {acc['count']} measurements (largest {100 * acc['max']:.2f}).")  # fmt: skip
    for a, b in data["same_curves"]:
        why = f" {TWINS_WHY}" if {a, b} == TWINS else ""
        lines.append(f"- {d.names[a]} and {d.names[b]} gave the same test accuracy in every round of every seed.{why}")
    return lines or ["- None."]


def family_table(rows: list[Row], primary: bool) -> list[str]:
    """The primary family with the sign test and the final round; the alignment family as measured."""
    if primary:
        lines = table(["comparison", "mean difference, points", "95 % CI", "p", "p (exact sign test)", "p (Holm)",
                       "seeds higher", "final round: difference, p", "verdict"])  # fmt: skip
    else:
        lines = table(["comparison", "mean difference (points; barrier: nats)", "95 % CI", "p", "p (Holm)", "seeds higher",
                       "verdict"])  # fmt: skip
    for row in rows:
        c, unit = row.test, scale_of(row.name)[0]
        ci = "n/a" if c.low is None else f"[{unit * c.low:+.3f}, {unit * c.high:+.3f}]"
        p, holm = p_text(c, ".4f"), p_number(c.p_holm, ".4f")
        cells = [inline(row.name), f"{unit * c.mean:+.3f}", ci, p]
        if row.final is not None:
            sign, f = sign_test(c.diffs), row.final
            cells.append("n/a" if sign is None else f"{sign:.4f}")
        cells += [holm, f"{c.wins} of {len(c.seeds)}"]
        if row.final is not None:
            cells.append(f"{100 * f.mean:+.3f}, p {p_number(f.p_value, '.4f')}")
        short = verdict_cell(c, *scale_of(row.name)) if row.verdict.startswith("not resolved") else row.verdict
        lines.append(table_row([*cells, short]))
    return [*lines, "", VERDICT_KEY]  # what a cell's few words mean, once under the table


def grid_lines(d: Design, data: dict[str, Any]) -> list[str]:
    lines = table(["skew", "arm", *(f"lr {lr}" for lr in d.lrs), "chosen"])
    for alpha, arms in data["grid"].items():
        for arm, scores in arms.items():
            cells = " | ".join("collapsed" if s is None else f"{100 * s:.2f}" for s in scores.values())
            lines.append(f"| α={inline(alpha)} | {d.names[arm]} | {cells} | {inline(data['chosen'][alpha][arm])} |")
    return lines


def reading_note(tests: list[Paired]) -> str:
    """The rule, once: the Holm-adjusted t test decides; the std's uncertainty behind the MDE."""
    seeds = len(tests[0].seeds)
    low, high = std_factors(seeds)
    floors = floors_text(tests)
    return (f"A verdict is what the Holm-adjusted t test supports, the test of the 95 % interval beside it; the exact "
            f"sign-flip test in brackets is a distribution-free check{f' ({floors})' if floors else ''}. A 'not "
            f"resolved' says what the 95 % interval excludes, then the difference these {seeds} seeds could have "
            f"detected (80 % power, before Holm) with its range: the std of {seeds} differences is known only within "
            f"×{low:.2f} to ×{high:.2f} of the observed one (its 95 % chi-square interval, {seeds - 1} df), and the "
            "detectable difference with it, so the interval, not the detectable difference, states what was excluded. "
            "Differences in accuracy points, barriers in nats.")  # fmt: skip


def results(d: Design, data: dict[str, Any], reports: dict[str, dict[str, dict]], figure: list[str]) -> list[str]:
    """The page below its `## Results` heading, from the stored numbers; `figure`: the lines that show
    the families' figure, after their tables."""
    primary, alignment = primary_family(d, reports), alignment_rows(data)
    rounds = reports[d.alphas[0]]["all"]["setting"]["rounds"]
    body = ["## Results", "", f"The {d.model.upper()} version (100 clients, 10 a round, 5 local epochs, {rounds} rounds, "
            f"{len(primary[0].test.seeds)} seeds), {d.lead} {data['source']}.", "",
            "### Answers", "", *answers(d, primary, alignment, reports, data), "",
            "### The final round (not pre-registered; Holm within each report)", "",
            *(final_round(d, reports[alpha]["all"], alpha) for alpha in d.alphas), "",
            "### Observations (computed from the runs, not pre-registered)", "", *observations(d, data), "",
            reading_note([row.test for row in primary]), "",
            f"### Primary family: accuracy over the last 10 rounds (Holm {holm_span(primary)})", "",
            *family_table(primary, primary=True), "",
            f"### Alignment: mean over the run's measurements (Holm {holm_span(alignment)})", "",
            "Loss barrier in nats and fusion gap in accuracy points; lower is better aligned.", "",
            *family_table(alignment, primary=False), "", *figure,
            "### Learning rates (validation accuracy, %, last 10 of the grid's rounds)", "", *grid_lines(d, data), ""]  # fmt: skip
    twins = [list(pair) for pair in data["same_curves"] if set(pair) == TWINS]
    for alpha in d.alphas:
        for name, result in reports[alpha].items():
            body += [f"### α = {inline(alpha)}: {d.reports[name][1]}", ""]
            if twins and name == "all":
                body += ["FedPNU weight's rows at equal rounds repeat FedPFN's (equal by construction under FedAvg: "
                         "see Observations), so they are not a second finding; at equal upload it differs from "
                         "FedPFN by its smaller upload alone.", ""]  # fmt: skip
            body += [result["markdown"].split("\n", 1)[1].strip(), ""]
    return body
