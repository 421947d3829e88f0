"""The numbers a comparison reports: per-arm statistics over seeds and paired differences.

Standard deviations are sample standard deviations over seeds (n-1); the mean of the
per-seed differences arm − baseline gets a 95 % confidence interval from Student's t with
n-1 degrees of freedom.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy import stats

from fedpfn.analysis.plots import accuracy_points, setting_text
from fedpfn.analysis.runs import Arm, Run, comparable_arms, is_setting_key, seeds_text, varying_keys
from fedpfn.core.settings import ConfigError

CONFIDENCE = 0.95
METRICS_COMPARED = ("lastk", "final")  # ArmStats fields compared seed by seed


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
        title=f"{setting_text(setting)} · {setting.get('rounds')} rounds · {seeds_text(arms[0].seeds)}",
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


