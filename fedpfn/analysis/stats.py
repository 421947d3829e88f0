"""The numbers a comparison reports: per-arm statistics over seeds and paired comparisons.

Standard deviations are sample standard deviations over seeds (n-1). A comparison is an arm
against the baseline on the same seeds (a seed fixes the partition and the client sampling):
the per-seed differences arm − baseline and their test (`fedpfn.analysis.inference`, re-exported
here): Student's paired t test (n-1 df) with its 95 % interval, or up to 5 seeds the exact
sign-flip test, whose p cannot go below 2/2^n; differences equal to within float noise get no
test. The comparisons of one metric in one report (every arm against the baseline) are one
family: their p-values are Holm-adjusted (`holm`). Beside each stands the minimum detectable
effect at 80 % power (`mde`), capped by an accuracy's range, so that an interval holding 0 says
how large a difference these seeds could have shown; from a few seeds the std behind it is
itself uncertain (`std_factors`: ×0.60 to ×2.87 for 5 seeds), so the interval is the statement
of what was excluded and the MDE a rough guide. `sign_test` is the exact two-sided sign test.

Arms are compared at equal rounds (the mean of the last k evaluated rounds, the primary
metric, and the final round) and at equal bytes (`at_equal_bytes`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from fedpfn.analysis.inference import (  # noqa: F401  (re-exported: the comparisons' statistics)
    ALPHA,
    CONFIDENCE,
    POWER,
    Paired,
    adjust,
    holm,
    mde,
    mean_std,
    paired,
    sign_test,
    std_factors,
)
from fedpfn.analysis.plots import accuracy_points, cumulative_bytes, setting_text
from fedpfn.analysis.runs import Arm, Run, comparable_arms, is_setting_key, seeds_text, varying_keys
from fedpfn.core.settings import ConfigError

PRIMARY = "lastk"  # the metric a study's decision rule reads
METRICS_COMPARED = (PRIMARY, "final")  # ArmStats fields compared seed by seed
ACCURACY_SPAN = 1.0  # the largest difference of two accuracies (fractions of 1)
TRAFFIC = {"up": ("bytes_up",), "up_down": ("bytes_up", "bytes_down")}  # metrics.jsonl keys summed


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


# --- at equal bytes ---------------------------------------------------------------------------


def spent(rows: Sequence[dict[str, Any]], traffic: str) -> np.ndarray:
    """Bytes of `traffic` sent in rounds 1..r, for each round r (a run's rows are its rounds in order)."""
    return cumulative_bytes(rows, TRAFFIC[traffic])


def accuracy_at(budget: int, rows: Sequence[dict[str, Any]], sent: np.ndarray) -> float | None:
    """Test accuracy at `budget` bytes sent, linear between the evaluated rounds on either side;
    None before the first evaluated round. Where evaluated rounds sent the same total (rounds
    that sent nothing), the latest counts: the last model that budget pays for."""
    points = accuracy_points(rows)
    xs = sent[[r - 1 for r, _ in points]]
    ys = np.array([acc for _, acc in points])
    if budget < xs[0]:
        return None
    latest = np.r_[xs[1:] != xs[:-1], True]
    return float(np.interp(budget, xs[latest], ys[latest]))


@dataclass
class AtBytes:
    """An arm and the baseline compared at the same traffic budget.

    The budget is the least total that any run of either arm sent (bytes of `traffic`:
    upload, or upload + download), so every seed of both reaches it. Per seed: the first
    round by which each has sent the budget, and its accuracy at the budget (`accuracy_at`);
    `paired` compares those accuracies seed by seed, None when a seed reaches the budget
    before its first evaluated round.
    """

    label: str
    traffic: str
    budget_mb: float
    arm_round: dict[int, int]
    base_round: dict[int, int]
    arm_acc: dict[int, float | None]
    base_acc: dict[int, float | None]
    paired: Paired | None


def at_budget(arm: Arm, traffic: str, budget: int) -> tuple[dict[int, int], dict[int, float | None]]:
    """Per seed: the first round by which the arm has sent `budget` bytes, and its accuracy there."""
    sent = {run.seed: spent(run.rows, traffic) for run in arm.runs}
    rounds = {seed: int(np.searchsorted(sent[seed], budget)) + 1 for seed in sent}
    return rounds, {run.seed: accuracy_at(budget, run.rows, sent[run.seed]) for run in arm.runs}


def at_equal_bytes(arm: Arm, base: Arm, traffic: str) -> AtBytes | None:
    """`arm` against `base` at the least total either sent; None if the runs recorded no bytes."""
    budget = min(int(spent(run.rows, traffic)[-1]) for run in (*arm.runs, *base.runs))
    if budget <= 0:
        return None
    arm_round, arm_acc = at_budget(arm, traffic, budget)
    base_round, base_acc = at_budget(base, traffic, budget)
    every_seed = None not in (*arm_acc.values(), *base_acc.values())
    compared = paired(arm.label, f"equal_{traffic}", arm_acc, base_acc, ACCURACY_SPAN) if every_seed else None
    return AtBytes(arm.label, traffic, budget / 1e6, arm_round, base_round, arm_acc, base_acc, compared)


# --- per arm, and the report ------------------------------------------------------------------


@dataclass
class ArmStats:
    """One arm's per-seed numbers (accuracy as a fraction of 1, traffic in MB = 10^6 bytes)."""

    label: str
    paths: dict[int, str]
    final: dict[int, float]
    lastk: dict[int, float]
    reach: dict[int, int | None]
    mb_up: dict[int, float]
    mb_up_down: dict[int, float]
    rounds: int

    @property
    def seeds(self) -> list[int]:
        return sorted(self.final)

    def row(self) -> dict[str, Any]:
        """The arm's summary over seeds: what the table shows, as plain numbers.

        `rounds_to_target_mean` is the mean over the `reached_target` seeds that reached the
        target only, never over all seeds."""
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
            "mb_up_down_total": float(np.mean(list(self.mb_up_down.values()))),
        }


def arm_stats(arm: Arm, k: int, target: float) -> ArmStats:
    runs = arm.runs
    return ArmStats(
        label=arm.label,
        paths={run.seed: str(run.path) for run in runs},
        final={run.seed: accuracy_points(run.rows)[-1][1] for run in runs},
        lastk={run.seed: float(np.mean([acc for _, acc in last_k(run.rows, k)])) for run in runs},
        reach={run.seed: rounds_to_target(run.rows, target) for run in runs},
        mb_up={run.seed: int(spent(run.rows, "up")[-1]) / 1e6 for run in runs},
        mb_up_down={run.seed: int(spent(run.rows, "up_down")[-1]) / 1e6 for run in runs},
        rounds=len(runs[0].rows),
    )


TESTED = ("mean", "low", "high", "p_value", "p_holm", "mde", "wins")  # a comparison's CSV columns


@dataclass
class Report:
    """Everything a comparison shows: per-arm statistics and comparisons with the baseline."""

    title: str
    setting: dict[str, Any]
    baseline: str
    last_k: int
    window: str
    target: float
    command: str
    arms: list[ArmStats]
    paired: list[Paired]
    at_bytes: list[AtBytes]
    differences: dict[str, dict[str, Any]]
    curves: dict[str, list[list[dict[str, Any]]]]

    @property
    def seeds(self) -> list[int]:
        return self.arms[0].seeds

    def rows(self) -> list[dict[str, Any]]:
        """One CSV row per arm: its summary, then its comparisons with the baseline."""
        rows = []
        for arm in self.arms:
            row = {**arm.row(), "lastk_window": self.window}
            for p in self.paired:
                if p.label == arm.label:
                    row |= {f"{p.metric}_diff_{k}": getattr(p, k) for k in TESTED}
            for a in self.at_bytes:
                if a.label == arm.label:
                    row[f"equal_{a.traffic}_budget_mb"] = a.budget_mb
                    row |= {f"equal_{a.traffic}_diff_{k}": a.paired and getattr(a.paired, k) for k in TESTED}
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


def comparisons(arms: Sequence[Arm], stats_: Sequence[ArmStats]) -> tuple[list[Paired], list[AtBytes]]:
    """Every arm against the first (the baseline): at equal rounds per metric, then at equal
    bytes per traffic; each metric's p-values Holm-adjusted together."""
    base = stats_[0]
    at_rounds = [
        paired(s.label, metric, getattr(s, metric), getattr(base, metric), ACCURACY_SPAN)
        for s in stats_[1:]
        for metric in METRICS_COMPARED
    ]
    found = (at_equal_bytes(arm, arms[0], traffic) for traffic in TRAFFIC for arm in arms[1:])
    at_bytes = [a for a in found if a is not None]
    adjust([*at_rounds, *(a.paired for a in at_bytes if a.paired is not None)])
    return at_rounds, at_bytes


def analyse(
    runs: Sequence[Run], baseline: str | None = None, k: int = 5, target: float = 0.8, command: str = ""
) -> Report:
    """Group runs into arms, check they are comparable, and compute every number of the report."""
    arms = comparable_arms(runs)
    base_label = choose_baseline(arms, baseline)
    arms.sort(key=lambda arm: arm.label != base_label)  # baseline first, the rest as found
    stats_ = [arm_stats(arm, k, target) for arm in arms]
    at_rounds, at_bytes = comparisons(arms, stats_)
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
        paired=at_rounds,
        at_bytes=at_bytes,
        differences=arm_differences(arms),
        curves={arm.label: [run.rows for run in arm.runs] for arm in arms},
    )
