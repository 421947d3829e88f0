"""A comparison as a reader gets it: Markdown tables, CSV, JSON and figures."""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from fedpfn.analysis.inference import adjust, recompute
from fedpfn.analysis.markup import code, inert, table
from fedpfn.analysis.paired_text import excluded, p_number, p_text, verdict, verdict_cell  # noqa: F401  (re-exported)
from fedpfn.analysis.plots import PairedSeries, plot_bytes, plot_comparison, plot_paired
from fedpfn.analysis.row_tables import row_tables
from fedpfn.analysis.runs import display_value
from fedpfn.analysis.stats import ACCURACY_SPAN, ALPHA, POWER, TRAFFIC, ArmStats, AtBytes, Paired, Report
from fedpfn.core.files import OUTPUTS_MANIFEST, REPORT, DamagedFile, OwnOutputs, read_json
from fedpfn.core.settings import ConfigError

STD_TEXT = "std over seeds, n-1"
CI_TEXT = "95 % CI, Student's t with n-1 df"
TRAFFIC_TEXT = {"up": "upload", "up_down": "upload + download"}
TRAFFIC_KEYS = {TRAFFIC_TEXT[traffic]: keys for traffic, keys in TRAFFIC.items()}  # the bytes figure's panels
COMPARISON_HEAD = ("mean difference, points", "95 % CI", "p", "p Holm", "seeds where the arm wins", "verdict")


def _pct(mean: float, std: float | None) -> str:
    return f"{100 * mean:.2f} ± {100 * std:.2f}" if std is not None else f"{100 * mean:.2f} (1 seed, no std)"


def _points(value: float) -> str:
    return f"{100 * value:+.2f}"


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}{'s' if number != 1 else ''}"


def _of_seeds(count: int, seeds: int) -> str:
    return f"{count} of {_count(seeds, 'seed')}"


def metric_name(report: Report, metric: str) -> str:
    """'mean of last 5 of 30 rounds', 'final round', 'at equal upload'."""
    if metric.startswith("equal_"):
        return f"at equal {TRAFFIC_TEXT[metric.removeprefix('equal_')]}"
    return f"mean of {report.window}" if metric == "lastk" else "final round"


def header_lines(report: Report) -> list[str]:
    differ = ["algorithm"] + [
        f"{key} ({'; '.join(f'{label} {display_value(v)}' for label, v in values.items())})"
        for key, values in report.differences.items()
    ]
    return [
        f"## {report.title}",
        "",
        *([f"Command: {code(report.command)}", ""] if report.command else []),
        (
            f"Seeds: {', '.join(map(str, report.seeds))}, one run per arm and seed; a seed fixes the partition "
            "and the client sampling, so arms are compared seed by seed."
        ),
        (
            f"Test accuracy in %, mean ± {STD_TEXT}. "
            "Traffic: MB (10^6 bytes) uploaded by the clients, and downloaded by them, mean over seeds."
        ),
        f"Arms differ in: {', '.join(differ)}.",
        "",
    ]


def reach_text(row: dict[str, Any]) -> str:
    """'25.0 (2 of 5 seeds)': a mean over the seeds that reached the target, and how many did."""
    first, seeds = row["rounds_to_target_mean"], _of_seeds(row["reached_target"], row["seeds"])
    return f"not reached ({seeds})" if first is None else f"{first:.1f} ({seeds})"


def arm_table(report: Report) -> list[str]:
    lines = table(["arm", "seeds", f"final accuracy, % (mean ± {STD_TEXT})", f"{report.window}, % (mean ± {STD_TEXT})",
                   f"rounds to {100 * report.target:g} %: mean over the seeds that reached it (how many of all)",
                   "MB up per round", "MB up in total", "MB up + down in total"])  # fmt: skip
    for row in (arm.row() for arm in report.arms):
        lines.append(
            f"| {row['arm']} | {row['seeds']} | {_pct(row['final_acc_mean'], row['final_acc_std'])} "
            f"| {_pct(row['lastk_acc_mean'], row['lastk_acc_std'])} | {reach_text(row)} "
            f"| {row['mb_up_per_round']:.3f} | {row['mb_up_total']:.2f} | {row['mb_up_down_total']:.2f} |"
        )
    return lines


def comparison_cells(p: Paired) -> str:
    """The cells of COMPARISON_HEAD for one comparison, as one string of cells."""
    ci = "n/a (1 seed)" if p.std is None else "n/a"
    if p.low is not None and p.high is not None:
        ci = f"[{_points(p.low)}, {_points(p.high)}]"
    ties = f" ({p.ties} tied)" if p.ties else ""
    wins = f"{p.wins} of {len(p.diffs)}{ties}"
    return f"{_points(p.mean)} | {ci} | {p_text(p)} | {p_number(p.p_holm)} | {wins} | {verdict_cell(p)}"


def comparison_text(baseline: str) -> str:
    return (
        f"Arm − {baseline} on the same seed, in accuracy points: the mean over seeds, its 95 % confidence "
        "interval (Student's t, n-1 df) and the two-sided p of the same paired test (scipy.stats.ttest_rel), "
        "which decides; in brackets the exact sign-flip test, a distribution-free check that cannot go below "
        "2/2^n (0.25 with 3 seeds, 0.0625 with 5); differences equal to within float noise have no test. "
        "p Holm is p adjusted with Holm's step-down method across the arms compared on the same accuracy in "
        f"this report; a difference is resolved (higher, lower) when p Holm < {ALPHA:.2f}, and 'not resolved "
        "after Holm' where its interval excludes 0 but Holm's correction does not. A 'not resolved' rules out "
        "what its 95 % interval excludes, and gives the minimum detectable effect (MDE): the true mean "
        f"difference that these seeds, with the observed std of the differences, would detect with {100 * POWER:g} % "
        f"power at p < {ALPHA:.2f} before Holm's adjustment (paired t test, noncentral t); in brackets the MDE over "
        "the 95 % chi-square interval of that std (n-1 df), which from a few seeds is wide: the interval is the "
        "statement."
    )


def paired_table(report: Report) -> list[str]:
    """One row per arm and compared accuracy (at equal rounds): the difference and its test."""
    if not report.paired:
        return ["", "One arm only: no paired differences."]
    lines = [
        "",
        f"### Paired differences against {report.baseline} at equal rounds",
        "",
        comparison_text(report.baseline),
        "",
        *table(["arm", "accuracy", *COMPARISON_HEAD]),
    ]
    for p in report.paired:
        lines.append(f"| {p.label} | {metric_name(report, p.metric)} | {comparison_cells(p)} |")
    return lines


def _mean(values: dict[int, Any]) -> float:
    return float(np.mean(list(values.values())))


def bytes_row(a: AtBytes) -> str:
    """One arm at equal bytes: the budget, when each side spent it, the accuracies there and the test."""
    spent = f"{_mean(a.arm_round):.1f} / {_mean(a.base_round):.1f}"
    if a.paired is None:
        why = "no test: a seed spends the budget before its first evaluated round"
        return f"| {a.label} | {a.budget_mb:.2f} | {spent} | n/a | {'n/a | ' * 5}{why} |"
    accuracy = f"{100 * _mean(a.arm_acc):.2f} / {100 * _mean(a.base_acc):.2f}"
    return f"| {a.label} | {a.budget_mb:.2f} | {spent} | {accuracy} | {comparison_cells(a.paired)} |"


def bytes_table(report: Report, traffic: str) -> list[str]:
    """Each arm against the baseline at the same bytes of `traffic` (stats.AtBytes)."""
    found = [a for a in report.at_bytes if a.traffic == traffic]
    if not found:
        return []
    what, base = TRAFFIC_TEXT[traffic], report.baseline
    return [
        "",
        f"### At equal {what}",
        "",
        (
            f"Each arm against {base} at the same {what}: the budget is the least total that any run of the "
            "two sent, so every seed of both reaches it; each seed's test accuracy at the budget is "
            "interpolated linearly between its evaluated rounds on a bytes axis, then paired by seed and "
            f"tested as above (Holm across this table's {_count(len(found), 'comparison')})."
        ),
        "",
        *table(["arm", "budget, MB", f"round by which it is spent: arm / {base} (mean over seeds)",
                f"accuracy at the budget, %: arm / {base} (mean over seeds)", *COMPARISON_HEAD]),
        *map(bytes_row, found),
    ]


def markdown(report: Report) -> str:
    report = inert(report)  # its labels and settings come from folders anyone may have written
    tables = arm_table(report) + paired_table(report) + [ln for t in TRAFFIC for ln in bytes_table(report, t)]
    tables += row_tables([arm.label for arm in report.arms], list(report.curves.values()))
    return "\n".join(header_lines(report) + tables) + "\n"


def comparison_json(p: Paired | None) -> dict[str, Any] | None:
    return None if p is None else {**dataclasses.asdict(p), "verdict": verdict(p)}


def report_json(report: Report) -> dict[str, Any]:
    """The same numbers as the tables, per seed too (accuracy as a fraction of 1)."""
    arms = []
    for arm in report.arms:
        runs = [
            {"seed": s, "path": arm.paths[s], "final_acc": arm.final[s], "lastk_acc": arm.lastk[s],
             "rounds_to_target": arm.reach[s], "mb_up_total": arm.mb_up[s], "mb_up_down_total": arm.mb_up_down[s]}
            for s in arm.seeds
        ]  # fmt: skip
        arms.append({**arm.row(), "runs": runs})
    return {
        "title": report.title,
        "command": report.command,
        "setting": report.setting,
        "seeds": report.seeds,
        "baseline": report.baseline,
        "last_k": report.last_k,
        "window": report.window,
        "target": report.target,
        "conventions": CONVENTIONS,
        "arms": arms,
        "paired": [comparison_json(p) for p in report.paired],
        "at_equal_bytes": [
            {**dataclasses.asdict(a), "paired": comparison_json(a.paired)} for a in report.at_bytes
        ],
        "differences": report.differences,
    }


CONVENTIONS = {
    "accuracy": "test accuracy as a fraction of 1",
    "std": "sample standard deviation over seeds (n-1)",
    "interval": f"{CI_TEXT}, of the mean per-seed difference arm - baseline (scipy.stats.ttest_rel)",
    "p_value": "two-sided p of the paired t test, the test of the interval, which decides; null with 1 seed or "
    "differences equal within float noise",
    "p_exact": "two-sided p of the exact sign-flip test, a distribution-free check beside it (`p_floor`: the "
    "smallest it can give with these seeds)",
    "p_holm": "p adjusted with Holm's step-down method across the report's comparisons of the same metric",
    "mde": f"the true mean difference detected with {POWER:g} power at two-sided p < {ALPHA:.2f}, given the "
    "seeds and the observed std of the differences (noncentral t); null, with `mde_why`, where the "
    "difference exceeds an accuracy's range",
    "verdict": f"higher / lower when p_holm < {ALPHA:.2f}, else 'not resolved' with what the interval "
    "excludes and the mde, ranged over the std's 95 % chi-square interval (n-1 df)",
    "rounds_to_target_mean": "mean over the reached_target seeds that reached the target, not over all seeds",
    "mb": "10^6 bytes; up: sent by the clients, up_down: sent by and to them",
    "at_equal_bytes": "each arm against the baseline at the least total (of `traffic`) any run of the two "
    "sent; accuracy at that budget interpolated linearly between evaluated rounds, paired by seed",
}


def _paired(value: dict[str, Any] | None) -> Paired | None:
    """A stored comparison of accuracies, tested again from its differences by today's rules."""
    return None if value is None else recompute(value, ACCURACY_SPAN)


def _by_seed(values: dict[str, Any]) -> dict[int, Any]:
    return {int(seed): value for seed, value in values.items()}  # JSON's keys are strings


def report_from_json(data: dict[str, Any]) -> Report:
    """The Report behind `report_json`'s output, its curves left out: the tables again, from the
    JSON alone, where the runs are gone (the verdicts recomputed from the stored numbers)."""
    rounds = data["setting"]["rounds"]
    arms = [
        ArmStats(arm["arm"], *({r["seed"]: r[k] for r in arm["runs"]} for k in ARM_RUN_KEYS), rounds)
        for arm in data["arms"]
    ]
    at_bytes = [
        AtBytes(a["label"], a["traffic"], a["budget_mb"], *(_by_seed(a[k]) for k in AT_BYTES_SEEDS),
                _paired(a["paired"]))
        for a in data["at_equal_bytes"]
    ]  # fmt: skip
    paired = [p for p in map(_paired, data["paired"]) if p is not None]
    adjust([*paired, *(a.paired for a in at_bytes if a.paired is not None)])  # as stats.comparisons does
    fixed = {k: data[k] for k in ("title", "setting", "baseline", "last_k", "window", "target", "command")}
    return Report(
        **fixed, arms=arms, paired=paired, at_bytes=at_bytes, differences=data["differences"], curves={}
    )


ARM_RUN_KEYS = ("path", "final_acc", "lastk_acc", "rounds_to_target", "mb_up_total", "mb_up_down_total")
AT_BYTES_SEEDS = ("arm_round", "base_round", "arm_acc", "base_acc")


def rewrite_tables(out: Path, name: str = REPORT) -> str:
    """NAME.md, NAME.csv and NAME.json in `out` again from its NAME.json, the figures left as drawn
    (they show no verdict); the Markdown written. For reports whose runs are not on this machine."""
    report = report_from_json(read_json(out / f"{name}.json"))
    outputs = OwnOutputs(out, "fedpfn's report", legacy=written_by_report)
    try:
        outputs.check([f"{name}.{suffix}" for suffix in ("md", "csv", "json")])
        outputs.write(f"{name}.csv", csv_text(report).encode())
        outputs.write(f"{name}.json", (json.dumps(report_json(report), indent=2) + "\n").encode())
        text = markdown(report)
        outputs.write(f"{name}.md", text.encode())
    except DamagedFile as err:
        raise ConfigError(str(err)) from None
    return text


def csv_text(report: Report) -> str:
    rows = report.rows()
    text = io.StringIO()
    writer = csv.DictWriter(text, fieldnames=list(dict.fromkeys(key for row in rows for key in row)))
    writer.writeheader()
    writer.writerows(rows)
    return text.getvalue()


def paired_panels(report: Report) -> dict[str, list[PairedSeries]]:
    """The paired differences as the figure draws them, in accuracy points: at equal rounds, and at equal upload."""
    panels: dict[str, list[PairedSeries]] = {}
    at_upload = [a.paired for a in report.at_bytes if a.traffic == "up" and a.paired is not None]
    for p in [*report.paired, *at_upload]:
        panels.setdefault(metric_name(report, p.metric), []).append(series_of(p, 100))
    return panels


def series_of(p: Paired, scale: float) -> PairedSeries:
    """A comparison as the paired figure draws it: its per-seed differences, mean and interval × `scale`."""
    low, high = (None if v is None else scale * v for v in (p.low, p.high))
    return PairedSeries(p.label, [scale * d for d in p.diffs], scale * p.mean, low, high)


def written_by_report(path: Path) -> bool:
    """A file this module wrote before it kept a manifest, known by its content: the JSON's
    conventions, the Markdown's header line, the CSV's first column; a figure beside them."""
    try:
        if path.suffix == ".json":
            return {"conventions", "arms", "paired"} <= set(read_json(path))
        with path.open("rb") as fh:  # a regular file (OwnOutputs asks of no other), its start only
            text = fh.read(4096)
        if path.suffix == ".md":
            return f"mean ± {STD_TEXT}".encode() in text
        if path.suffix == ".csv":
            return text.startswith(b"arm,")
        siblings = [p for p in path.parent.glob("*.json") if p.name != OUTPUTS_MANIFEST]
        return path.suffix == ".png" and text.startswith(b"\x89PNG") and any(map(written_by_report, siblings))
    except (OSError, DamagedFile, TypeError):
        return False


def report_names(report: Report, name: str) -> list[str]:
    """The files `write_report` writes, in the order it returns them."""
    names = [f"{name}.md", f"{name}.csv", f"{name}.json", f"{name}.png"]
    return names + (["paired_differences.png"] if report.paired else []) + [f"{name}_bytes.png"]


def draw_report(report: Report, folder: Path, name: str) -> list[Path]:
    """Every file of the report in `folder`: `report_names` in order, then the figures' other formats."""
    made = [folder / n for n in report_names(report, name)]
    made[0].write_text(markdown(report))
    made[1].write_bytes(csv_text(report).encode())
    made[2].write_text(json.dumps(report_json(report), indent=2) + "\n")
    plot_comparison(report.curves, made[3], title=report.title)
    if report.paired:
        title = f"{report.title}\ndifference from {report.baseline} on the same seed"
        plot_paired(paired_panels(report), report.baseline, made[4], title=title)
    plot_bytes(report.curves, TRAFFIC_KEYS, made[-1], title=report.title)
    return made + sorted(set(folder.iterdir()) - set(made))


def write_report(report: Report, out: Path, name: str = REPORT) -> list[Path]:
    """NAME.md, NAME.csv, NAME.json, NAME.png (curves) and paired_differences.png in `out`.

    These files are derived from the run folders alone, so an earlier report is replaced;
    a user's file under one of these names, or a link, is refused (ConfigError) before
    anything is written, and nothing else in `out` is touched (fedpfn.core.files.OwnOutputs).
    The files are made in a private folder first, then moved in one by one, atomically.
    """
    outputs = OwnOutputs(out, "fedpfn's report", legacy=written_by_report)
    try:
        outputs.check(report_names(report, name))  # before anything is drawn
        with tempfile.TemporaryDirectory(prefix="fedpfn-report-") as staging:
            made = draw_report(report, Path(staging), name)
            outputs.check([path.name for path in made])  # the figures' other formats too
            out.mkdir(parents=True, exist_ok=True)
            return [outputs.write(path.name, path.read_bytes()) for path in made]
    except DamagedFile as err:
        raise ConfigError(str(err)) from None
