"""Compare finished runs with their uncertainty: per-arm statistics and paired differences.

    python -m fedpfn.analysis.report runs/study-a0.1 [--baseline fedavg] [--last-k 5] [--target 0.8] [--out DIR]

A run folder is a folder with `config.json` and `summary.json` (searched below each
argument). Runs whose settings differ only in `seed` (and where and how they ran: `out`,
`checkpoint_every`, ...) form an arm. Arms are compared only if they share the federation
setting (data, model, clients, rounds, partition, local training, evaluation) and the same
seeds, since a seed fixes the partition and the client sampling: the difference between two
arms on one seed is then a paired difference, and its mean over seeds gets a 95 % confidence
interval from Student's t with n-1 degrees of freedom. Standard deviations are sample
standard deviations over seeds (n-1). Writes report.md, report.csv, report.json and figures.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import functools
import json
import math
import os
import shlex
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from scipy import stats

from fedpfn.core.settings import ConfigError
from fedpfn.analysis.plots import PairedSeries, accuracy_points, plot_comparison, plot_paired, setting_text

CONFIG, METRICS, SUMMARY = "config.json", "metrics.jsonl", "summary.json"
# Where and how a run was executed, not what it computed: never part of an arm.
IGNORED_KEYS = (
    "seed", "out", "overwrite", "provenance", "checkpoint_every", "data_root", "download",
    "client_cpus", "client_gpus", "ray_address", "target_accuracy", "tensorboard", "wandb",
)  # fmt: skip
# The federation setting: equal in every arm, or the arms are not comparable.
SETTING_KEYS = (
    "dataset", "model", "num_clients", "clients_per_round", "rounds", "partition", "alpha",
    "shards_per_client", "min_partition_size", "local_epochs", "batch_size", "simulate_failures",
)  # fmt: skip
SETTING_PREFIXES = ("eval", "holdout", "validation", "val_", "local_test")
STD_TEXT = "std over seeds, n-1"
CI_TEXT = "95 % CI, Student's t with n-1 df"
CONFIDENCE = 0.95
METRICS_COMPARED = ("lastk", "final")  # ArmStats fields compared seed by seed


@dataclass
class Run:
    """One finished run folder: its settings (provenance left out) and its metric rows."""

    path: Path
    config: dict[str, Any]
    rows: list[dict[str, Any]]

    @property
    def seed(self) -> int:
        return int(self.config["seed"])


@dataclass
class Arm:
    """Runs of one setting over several seeds, sorted by seed."""

    label: str
    runs: list[Run]

    @property
    def seeds(self) -> list[int]:
        return [run.seed for run in self.runs]


@dataclass
class Paired:
    """Arm minus baseline on the same seed, for one metric."""

    label: str
    metric: str
    seeds: list[int]
    diffs: list[float]
    mean: float
    std: float | None
    low: float | None
    high: float | None
    t_quantile: float | None
    wins: int
    ties: int


# --- finding and reading run folders ------------------------------------------------------


def find_run_folders(paths: Iterable[str | Path]) -> list[Path]:
    """Every folder holding config.json below the arguments; unfinished ones are refused.

    In the order of the arguments (each one's runs by path), so arms are listed as given.
    """
    found: list[Path] = []
    for raw in paths:
        top = Path(raw)
        if not top.is_dir():
            raise ConfigError(f"runs: '{raw}' is not a folder")
        for folder, subfolders, files in os.walk(top):
            if CONFIG in files:
                found.append(Path(folder))
                subfolders.clear()  # a run's own subfolders hold no runs
            subfolders.sort()
    if not found:
        raise ConfigError(f"runs: no run folder (with {CONFIG}) below {', '.join(map(str, paths))}")
    unfinished = [str(p) for p in found if not (p / SUMMARY).exists()]
    if unfinished:
        raise ConfigError(
            f"runs: unfinished (no {SUMMARY}): {', '.join(unfinished)}; resume them "
            "(python run_sim.py --resume DIR) or leave them out"
        )
    return list(dict.fromkeys(p.resolve() for p in found))


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ConfigError(f"runs: cannot read {path} ({err})") from None


def read_metrics(path: Path, rounds: int) -> list[dict[str, Any]]:
    """Strictly: a finished run has rounds 1..rounds once each, the last one evaluated."""
    rows: list[dict[str, Any]] = []
    try:
        lines = path.read_text().splitlines()
    except (OSError, UnicodeDecodeError) as err:
        raise ConfigError(f"runs: cannot read {path} ({err})") from None
    for number, line in enumerate(lines, 1):
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            raise ConfigError(f"runs: {path} line {number} is not JSON") from None
        if not isinstance(row, dict) or "round" not in row:
            raise ConfigError(f"runs: {path} line {number} has no 'round'")
        rows.append(row)
    found = [row["round"] for row in rows]
    if found != list(range(1, rounds + 1)):
        raise ConfigError(
            f"runs: {path} holds rounds {_span(found)}; a finished run holds 1-{rounds} once each"
        )
    if rows[-1].get("test_accuracy") is None:
        raise ConfigError(f"runs: {path}: the last round has no test_accuracy")
    return rows


def _span(rounds: list[Any]) -> str:
    return ", ".join(map(str, rounds[:8])) + (", ..." if len(rounds) > 8 else "") if rounds else "none"


def read_run(path: Path) -> Run:
    config = _read_json(path / CONFIG)
    if not isinstance(config, dict) or "seed" not in config or "rounds" not in config:
        raise ConfigError(f"runs: {path / CONFIG} is not a run config (no seed or rounds)")
    config.pop("provenance", None)
    return Run(path, config, read_metrics(path / METRICS, int(config["rounds"])))


def load_runs(paths: Iterable[str | Path]) -> list[Run]:
    return [read_run(path) for path in find_run_folders(paths)]


# --- arms and comparability ----------------------------------------------------------------


def arm_key(config: dict[str, Any]) -> str:
    return json.dumps({k: v for k, v in config.items() if k not in IGNORED_KEYS}, sort_keys=True)


def is_setting_key(key: str) -> bool:
    return key in SETTING_KEYS or key.startswith(SETTING_PREFIXES)


def varying_keys(configs: Sequence[dict[str, Any]]) -> list[str]:
    """Keys (outside IGNORED_KEYS) whose value differs between the configs that have them.

    An algorithm's own hyperparameters (anchor_ratio, prox_mu) are absent from the configs
    of other algorithms; absence is not a difference.
    """
    keys = sorted({k for c in configs for k in c} - set(IGNORED_KEYS))
    return [k for k in keys if len({json.dumps(c[k], sort_keys=True) for c in configs if k in c}) > 1]


@functools.cache
def _defaults() -> dict[str, Any]:
    """RunConfig's defaults, imported only when a label needs them (fedpfn.core.config loads torch)."""
    from fedpfn.core.config import RunConfig

    fields = dataclasses.fields(RunConfig)
    return {f.name: f.default for f in fields if f.default is not dataclasses.MISSING}


def arm_labels(configs: Sequence[dict[str, Any]]) -> list[str]:
    """'fedpfn', 'fedpfn server=fedavgm': the algorithm, then what tells apart its own arms.

    A key shows where it varies between arms of the same algorithm and the arm's value
    is not the default, so two arms never share a label.
    """
    labels = []
    for config in configs:
        same_algorithm = [c for c in configs if c.get("algorithm") == config.get("algorithm")]
        keys = [k for k in varying_keys(same_algorithm) if k != "algorithm" and k in config]
        defaults = _defaults() if keys else {}
        extra = [f"{k}={_text(config[k])}" for k in keys if k not in defaults or config[k] != defaults[k]]
        labels.append(" ".join([str(config.get("algorithm")), *extra]))
    return labels


def _text(value: Any) -> str:
    return "null" if value is None else str(value)


def group_arms(runs: Sequence[Run]) -> list[Arm]:
    """Runs that differ only in IGNORED_KEYS (seed, out, ...) form one arm; one run per seed."""
    groups: dict[str, list[Run]] = {}
    for run in runs:
        groups.setdefault(arm_key(run.config), []).append(run)
    labels = arm_labels([group[0].config for group in groups.values()])
    check_distinct(labels, list(groups.values()))
    arms = []
    for label, group in zip(labels, groups.values()):
        group.sort(key=lambda run: run.seed)
        seeds = [run.seed for run in group]
        twice = sorted({s for s in seeds if seeds.count(s) > 1})
        if twice:
            paths = [str(run.path) for run in group if run.seed == twice[0]]
            raise ConfigError(f"runs: arm '{label}' has seed {twice[0]} more than once: {', '.join(paths)}")
        arms.append(Arm(label, group))
    return arms


def check_distinct(labels: Sequence[str], groups: Sequence[Sequence[Run]]) -> None:
    """Two arms whose configs differ only in keys that some runs lack cannot be told apart."""
    for i, label in enumerate(labels):
        if label in labels[:i]:
            first, second = groups[labels.index(label)][0], groups[i][0]
            keys = sorted(set(first.config) ^ set(second.config))
            raise ConfigError(
                f"runs: {first.path} and {second.path} differ only in settings one of them lacks "
                f"({', '.join(keys)}); were they made by different versions of fedpfn?"
            )


def _where(arms: Sequence[Arm], key: str, value: Any) -> str:
    paths = [str(run.path) for arm in arms for run in arm.runs if run.config.get(key) == value]
    return paths[0] + (f" and {len(paths) - 1} more" if len(paths) > 1 else "")


def comparability_problems(arms: Sequence[Arm]) -> list[str]:
    """One line per setting key that differs between arms, and one if the seeds differ."""
    configs = [arm.runs[0].config for arm in arms]
    problems = []
    for key in filter(is_setting_key, varying_keys(configs)):
        values = list(dict.fromkeys(json.dumps(c.get(key)) for c in configs))
        found = "; ".join(f"{v} in {_where(arms, key, json.loads(v))}" for v in values)
        problems.append(f"runs are not comparable: {key} differs between arms: {found}")
    if len({tuple(arm.seeds) for arm in arms}) > 1:
        found = "; ".join(
            f"'{arm.label}' has {_seeds_text(arm.seeds)} ({arm.runs[0].path.parent})" for arm in arms
        )
        problems.append(f"runs are not comparable: the arms have different seeds: {found}")
    return problems


def _seeds_text(seeds: Sequence[int]) -> str:
    return "seed " + ", ".join(map(str, seeds)) if len(seeds) == 1 else "seeds " + ", ".join(map(str, seeds))


def comparable_arms(runs: Sequence[Run]) -> list[Arm]:
    arms = group_arms(runs)
    problems = comparability_problems(arms)
    if problems:
        raise ConfigError("\n".join(problems))
    return arms


# --- statistics ----------------------------------------------------------------------------


def mean_std(values: Sequence[float]) -> tuple[float, float | None]:
    """Mean and sample standard deviation (n-1); no std from one value."""
    array = np.asarray(values, dtype=float)
    return float(array.mean()), (float(array.std(ddof=1)) if len(array) > 1 else None)


def last_k(rows: Sequence[dict[str, Any]], k: int) -> list[tuple[int, float]]:
    """The last k evaluated rounds (rounds with a null accuracy are skipped)."""
    return accuracy_points(rows)[-k:]


def window_text(rows: Sequence[dict[str, Any]], k: int) -> str:
    """The window actually averaged: 'last 5 of 20 rounds', 'last 3 of 3 rounds', or the rounds."""
    used = [r for r, _ in last_k(rows, k)]
    total = len(rows)
    if used == list(range(total - len(used) + 1, total + 1)):
        return f"last {len(used)} of {total} rounds"
    return f"last {len(used)} evaluated rounds ({', '.join(map(str, used))} of {total})"


def rounds_to_target(rows: Sequence[dict[str, Any]], target: float) -> int | None:
    """First evaluated round whose accuracy reaches the target, None if none does."""
    return next((r for r, acc in accuracy_points(rows) if acc >= target), None)


def paired(label: str, metric: str, arm: dict[int, float], base: dict[int, float]) -> Paired:
    """Per-seed difference arm - baseline, its mean and a Student's t interval (n-1 df)."""
    seeds = sorted(arm)
    diffs = [arm[s] - base[s] for s in seeds]
    mean, std = mean_std(diffs)
    low = high = quantile = None
    if std is not None:
        quantile = float(stats.t.ppf(0.5 + CONFIDENCE / 2, len(diffs) - 1))
        half = quantile * std / math.sqrt(len(diffs))
        low, high = mean - half, mean + half
    wins, ties = sum(d > 0 for d in diffs), sum(d == 0 for d in diffs)
    return Paired(label, metric, seeds, diffs, mean, std, low, high, quantile, wins, ties)


@dataclass
class ArmStats:
    """One arm's per-seed numbers (accuracy as a fraction of 1, upload in MB = 10^6 bytes)."""

    label: str
    paths: dict[int, str]
    final: dict[int, float]
    lastk: dict[int, float]
    reach: dict[int, int | None]
    mb_up: dict[int, float]
    rounds: int

    @property
    def seeds(self) -> list[int]:
        return sorted(self.final)

    def row(self) -> dict[str, Any]:
        """The arm's summary over seeds: what the table shows, as plain numbers."""
        final_mean, final_std = mean_std(list(self.final.values()))
        window_mean, window_std = mean_std(list(self.lastk.values()))
        reached = [r for r in self.reach.values() if r is not None]
        mb_total = float(np.mean(list(self.mb_up.values())))
        return {
            "arm": self.label,
            "seeds": len(self.final),
            "final_acc_mean": final_mean,
            "final_acc_std": final_std,
            "lastk_acc_mean": window_mean,
            "lastk_acc_std": window_std,
            "rounds_to_target_mean": float(np.mean(reached)) if reached else None,
            "reached_target": len(reached),
            "mb_up_per_round": mb_total / self.rounds,
            "mb_up_total": mb_total,
        }


def arm_stats(arm: Arm, k: int, target: float) -> ArmStats:
    runs = arm.runs
    return ArmStats(
        label=arm.label,
        paths={run.seed: str(run.path) for run in runs},
        final={run.seed: accuracy_points(run.rows)[-1][1] for run in runs},
        lastk={run.seed: float(np.mean([acc for _, acc in last_k(run.rows, k)])) for run in runs},
        reach={run.seed: rounds_to_target(run.rows, target) for run in runs},
        mb_up={run.seed: sum(r.get("bytes_up") or 0 for r in run.rows) / 1e6 for run in runs},
        rounds=len(runs[0].rows),
    )


@dataclass
class Report:
    """Everything a comparison shows: per-arm statistics and paired differences to the baseline."""

    title: str
    setting: dict[str, Any]
    baseline: str
    last_k: int
    window: str
    target: float
    command: str
    arms: list[ArmStats]
    paired: list[Paired]
    differences: dict[str, dict[str, Any]]
    curves: dict[str, list[list[dict[str, Any]]]]

    @property
    def seeds(self) -> list[int]:
        return self.arms[0].seeds

    def rows(self) -> list[dict[str, Any]]:
        """One CSV row per arm: its summary, then its paired difference to the baseline."""
        rows = []
        for arm in self.arms:
            row = {**arm.row(), "lastk_window": self.window}
            for p in self.paired:
                if p.label == arm.label:
                    row |= {f"{p.metric}_diff_{k}": getattr(p, k) for k in ("mean", "low", "high", "wins")}
            rows.append(row)
        return rows


def choose_baseline(arms: Sequence[Arm], baseline: str | None) -> str:
    labels = [arm.label for arm in arms]
    if baseline is None:
        return "fedavg" if "fedavg" in labels else labels[0]
    if baseline not in labels:
        raise ConfigError(f"baseline: no arm '{baseline}'; the arms are: {', '.join(labels)}")
    return baseline


def arm_differences(arms: Sequence[Arm]) -> dict[str, dict[str, Any]]:
    """Every key (besides the algorithm) whose value differs between arms, per arm."""
    configs = [arm.runs[0].config for arm in arms]
    keys = [k for k in varying_keys(configs) if k != "algorithm"]
    return {k: {arm.label: config[k] for arm, config in zip(arms, configs) if k in config} for k in keys}


def analyse(
    runs: Sequence[Run], baseline: str | None = None, k: int = 5, target: float = 0.8, command: str = ""
) -> Report:
    """Group runs into arms, check they are comparable, and compute every number of the report."""
    arms = comparable_arms(runs)
    base_label = choose_baseline(arms, baseline)
    arms.sort(key=lambda arm: arm.label != base_label)  # baseline first, the rest as found
    stats_ = [arm_stats(arm, k, target) for arm in arms]
    base = stats_[0]
    paired_ = [
        paired(s.label, metric, getattr(s, metric), getattr(base, metric))
        for s in stats_[1:]
        for metric in METRICS_COMPARED
    ]
    setting = {key: value for key, value in arms[0].runs[0].config.items() if is_setting_key(key)}
    return Report(
        title=f"{setting_text(setting)} · {setting.get('rounds')} rounds · {_seeds_text(arms[0].seeds)}",
        setting=setting,
        baseline=base_label,
        last_k=k,
        window="; ".join(sorted({window_text(run.rows, k) for run in runs})),
        target=target,
        command=command,
        arms=stats_,
        paired=paired_,
        differences=arm_differences(arms),
        curves={arm.label: [run.rows for run in arm.runs] for arm in arms},
    )


# --- output --------------------------------------------------------------------------------


def _pct(mean: float, std: float | None) -> str:
    return f"{100 * mean:.2f} ± {100 * std:.2f}" if std is not None else f"{100 * mean:.2f} (1 seed, no std)"


def _points(value: float) -> str:
    return f"{100 * value:+.2f}"


def metric_name(report: Report, metric: str) -> str:
    return f"mean of {report.window}" if metric == "lastk" else "final round"


def header_lines(report: Report) -> list[str]:
    differ = ["algorithm"] + [
        f"{key} ({'; '.join(f'{label} {_text(v)}' for label, v in values.items())})"
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


def write_report(report: Report, out: Path, name: str = "report") -> list[Path]:
    """NAME.md, NAME.csv, NAME.json, NAME.png (curves) and paired_differences.png in `out`.

    These files are derived from the run folders alone, so an earlier report is replaced.
    """
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / f"{name}.md", out / f"{name}.csv", out / f"{name}.json", out / f"{name}.png"]
    paths[0].write_text(markdown(report))
    write_csv(report, paths[1])
    paths[2].write_text(json.dumps(report_json(report), indent=2) + "\n")
    plot_comparison(report.curves, paths[3], title=report.title)
    if report.paired:
        paths.append(out / "paired_differences.png")
        title = f"{report.title}\ndifference from {report.baseline} on the same seed"
        plot_paired(paired_panels(report), report.baseline, paths[-1], title=title)
    return paths


# --- command line --------------------------------------------------------------------------


def positive_int(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"'{text}' is not a whole number of rounds >= 1")
    return int(text)


def accuracy(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"'{text}' is not an accuracy in (0, 1]")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m fedpfn.analysis.report",
        description="Compare finished run folders: mean and n-1 std over seeds, paired differences "
        "against a baseline with a 95 % Student's t interval.",
    )
    parser.add_argument("runs", nargs="+", metavar="RUN_FOLDERS", help="run folders, or folders holding them")
    parser.add_argument(
        "--baseline", help="arm label to compare against (default: fedavg if present, else the first arm)"
    )
    parser.add_argument(
        "--last-k", type=positive_int, default=5, help="evaluated rounds averaged at the end (default: 5)"
    )
    parser.add_argument(
        "--target", type=accuracy, default=0.8, help="accuracy whose first round is reported (default: 0.8)"
    )
    parser.add_argument(
        "--out", help="folder for report.md/.csv/.json and figures (default: the folder above all runs)"
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    command = "python -m fedpfn.analysis.report " + shlex.join(sys.argv[1:] if argv is None else argv)
    try:
        runs = load_runs(args.runs)
        report = analyse(runs, args.baseline, args.last_k, args.target, command)
        out = Path(args.out) if args.out else Path(os.path.commonpath([run.path.parent for run in runs]))
        if out.exists() and not out.is_dir():
            raise ConfigError(f"out: '{out}' is a file, not a folder")
        paths = write_report(report, out)
    except (ConfigError, OSError) as err:
        for line in str(err).splitlines():
            print(f"error: {line}", file=sys.stderr)
        return 2
    print(markdown(report))
    print("written: " + ", ".join(map(str, paths)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
