"""A comparison as a reader gets it: Markdown tables, CSV, JSON and figures."""

from __future__ import annotations

import csv
import dataclasses
import json
import tempfile
from pathlib import Path
from typing import Any

from fedpfn.analysis.plots import PairedSeries, plot_comparison, plot_paired
from fedpfn.analysis.runs import display_value
from fedpfn.analysis.stats import METRICS_COMPARED, Paired, Report
from fedpfn.core.files import OUTPUTS_MANIFEST, DamagedFile, OwnOutputs, read_json
from fedpfn.core.settings import ConfigError

STD_TEXT = "std over seeds, n-1"
CI_TEXT = "95 % CI, Student's t with n-1 df"


def _pct(mean: float, std: float | None) -> str:
    return f"{100 * mean:.2f} ± {100 * std:.2f}" if std is not None else f"{100 * mean:.2f} (1 seed, no std)"


def _points(value: float) -> str:
    return f"{100 * value:+.2f}"


def metric_name(report: Report, metric: str) -> str:
    return f"mean of {report.window}" if metric == "lastk" else "final round"


def header_lines(report: Report) -> list[str]:
    differ = ["algorithm"] + [
        f"{key} ({'; '.join(f'{label} {display_value(v)}' for label, v in values.items())})"
        for key, values in report.differences.items()
    ]
    return [
        f"## {report.title}",
        "",
        *([f"Command: `{report.command}`", ""] if report.command else []),
        f"Seeds: {', '.join(map(str, report.seeds))}, one run per arm and seed; a seed fixes the partition "
        "and the client sampling, so arms are compared seed by seed.",
        f"Test accuracy in %, mean ± {STD_TEXT}. "
        "Upload: MB (10^6 bytes) sent by the clients, mean over seeds.",
        f"Arms differ in: {', '.join(differ)}.",
        "",
    ]


def arm_table(report: Report) -> list[str]:
    target = f"{100 * report.target:g} %"
    lines = [
        f"| arm | seeds | final accuracy, % (mean ± {STD_TEXT}) | {report.window}, % (mean ± {STD_TEXT}) "
        f"| rounds to {target} (mean over the seeds that reached it) | seeds that reached {target} "
        "| MB up per round | MB up in total |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in (arm.row() for arm in report.arms):
        first = row["rounds_to_target_mean"]
        reach = "not reached" if first is None else f"{first:.1f}"
        lines.append(
            f"| {row['arm']} | {row['seeds']} | {_pct(row['final_acc_mean'], row['final_acc_std'])} "
            f"| {_pct(row['lastk_acc_mean'], row['lastk_acc_std'])} | {reach} "
            f"| {row['reached_target']} of {row['seeds']} "
            f"| {row['mb_up_per_round']:.3f} | {row['mb_up_total']:.2f} |"
        )
    return lines


def _paired_cells(p: Paired) -> str:
    ci = f"[{_points(p.low)}, {_points(p.high)}]" if p.low is not None else "n/a (1 seed)"
    ties = f" ({p.ties} tied)" if p.ties else ""
    return f"{_points(p.mean)} | {ci} | {p.wins} of {len(p.diffs)}{ties}"


def paired_table(report: Report) -> list[str]:
    """One row per arm: for each compared accuracy, mean difference, interval and wins."""
    if not report.paired:
        return ["", "One arm only: no paired differences."]
    head = " | ".join(
        f"{metric_name(report, m)}: mean difference, points | {CI_TEXT} | seeds where the arm wins"
        for m in METRICS_COMPARED
    )
    lines = [
        "",
        f"### Paired differences against {report.baseline}",
        "",
        f"Arm − {report.baseline} on the same seed, in accuracy points; the mean over seeds with its "
        f"{CI_TEXT} (interval = mean ± t quantile × std (n-1) / √n).",
        "",
        f"| arm | {head} |",
        "|---|" + "---|---|---|" * len(METRICS_COMPARED),
    ]
    labels = list(dict.fromkeys(p.label for p in report.paired))
    for label in labels:
        cells = " | ".join(_paired_cells(p) for p in report.paired if p.label == label)
        lines.append(f"| {label} | {cells} |")
    return lines


def markdown(report: Report) -> str:
    return "\n".join(header_lines(report) + arm_table(report) + paired_table(report)) + "\n"


def report_json(report: Report) -> dict[str, Any]:
    """The same numbers as the tables, per seed too (accuracy as a fraction of 1)."""
    arms = []
    for arm in report.arms:
        runs = [
            {"seed": s, "path": arm.paths[s], "final_acc": arm.final[s], "lastk_acc": arm.lastk[s],
             "rounds_to_target": arm.reach[s], "mb_up_total": arm.mb_up[s]}
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
        "conventions": {
            "accuracy": "test accuracy as a fraction of 1",
            "std": "sample standard deviation over seeds (n-1)",
            "interval": f"{CI_TEXT}, of the mean per-seed difference arm - baseline",
            "mb": "10^6 bytes uploaded by the clients",
        },
        "arms": arms,
        "paired": [dataclasses.asdict(p) for p in report.paired],
        "differences": report.differences,
    }


def write_csv(report: Report, path: Path) -> None:
    rows = report.rows()
    fields = list(dict.fromkeys(key for row in rows for key in row))
    with open(path, "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=fields)
        writer.writeheader()
        writer.writerows(rows)


def paired_panels(report: Report) -> dict[str, list[PairedSeries]]:
    """The paired differences as the figure draws them, in accuracy points."""
    panels: dict[str, list[PairedSeries]] = {}
    for p in report.paired:
        scaled = [None if v is None else 100 * v for v in (p.low, p.high)]
        series = PairedSeries(p.label, [100 * d for d in p.diffs], 100 * p.mean, *scaled)
        panels.setdefault(metric_name(report, p.metric), []).append(series)
    return panels


def written_by_report(path: Path) -> bool:
    """A file this module wrote before it kept a manifest, known by its content: the JSON's
    conventions, the Markdown's header line, the CSV's first column; a figure beside them."""
    try:
        if path.suffix == ".json":
            return {"conventions", "arms", "paired"} <= set(read_json(path))
        text = path.read_bytes()[:4096]
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
    return names + (["paired_differences.png"] if report.paired else [])


def draw_report(report: Report, folder: Path, name: str) -> list[Path]:
    """Every file of the report in `folder`: `report_names` in order, then the figures' other formats."""
    made = [folder / n for n in report_names(report, name)]
    made[0].write_text(markdown(report))
    write_csv(report, made[1])
    made[2].write_text(json.dumps(report_json(report), indent=2) + "\n")
    plot_comparison(report.curves, made[3], title=report.title)
    if report.paired:
        title = f"{report.title}\ndifference from {report.baseline} on the same seed"
        plot_paired(paired_panels(report), report.baseline, made[4], title=title)
    return made + sorted(set(folder.iterdir()) - set(made))


def write_report(report: Report, out: Path, name: str = "report") -> list[Path]:
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
