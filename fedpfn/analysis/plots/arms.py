"""Figures over arms: a comparison across seeds, paired differences from the baseline, accuracy
against the bytes sent."""

from __future__ import annotations

import math
import textwrap
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import NamedTuple

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from fedpfn.analysis.plots.marks import mean_over_seeds, seed_key
from fedpfn.analysis.plots.style import (
    OKABE_ITO,
    Rows,
    accuracy_points,
    arm_styles,
    display_name,
    legend_below,
    new_figure,
    round_axis,
    save,
    styled,
    tick_name,
    wrapped,
)


TICK_WIDTH = 24  # characters of an arm's name per line on a panel's y axis (fedpfn.analysis.plots.style.tick_name)


class PairedSeries(NamedTuple):
    """One arm's per-seed differences from the baseline, their mean and 95 % interval (points)."""

    label: str
    points: Sequence[float]
    mean: float
    low: float | None
    high: float | None


# --- a comparison -----------------------------------------------------------------------------------


def seed_matrix(runs: Sequence[Rows]) -> tuple[np.ndarray, np.ndarray]:
    """Rounds evaluated in every run, and the accuracy of each run (row) at those rounds."""
    per_run = [dict(accuracy_points(rows)) for rows in runs]
    common = sorted(set.intersection(*(set(p) for p in per_run))) if per_run else []
    acc = np.array([[p[r] for r in common] for p in per_run], dtype=float).reshape(len(per_run), len(common))
    return np.array(common, dtype=int), acc


def _curves_panel(ax: Axes, curves: Mapping[str, Sequence[Rows]], styles: Mapping[str, dict]) -> None:
    """Each arm's mean accuracy (%) over seeds, with its ± 1 std band and, for few seeds, each seed's line."""
    last = 1
    for label, runs in curves.items():
        rounds, acc = seed_matrix(runs)
        if not len(rounds):
            continue
        mean_over_seeds(ax, rounds, 100 * acc, label=display_name(label), marker="." if len(rounds) < 30 else None,
                        **styles[label])  # fmt: skip
        last = max(last, int(rounds[-1]))
    ax.set_ylabel("test accuracy (%)")
    round_axis(ax, last)


def _final_panel(ax: Axes, curves: Mapping[str, Sequence[Rows]], styles: Mapping[str, dict]) -> None:
    """Final accuracy (%) of every seed (dots) and its mean ± n-1 std (diamond and bar), one row per arm."""
    labels = list(curves)
    for y, label in enumerate(labels):
        finals = 100 * np.array([points[-1][1] for points in map(accuracy_points, curves[label]) if points])
        color = styles[label]["color"]
        ax.scatter(finals, np.full(len(finals), y), color=color, s=8, alpha=0.6, zorder=2)
        std = finals.std(ddof=1) if len(finals) > 1 else 0.0
        ax.errorbar(finals.mean(), y, xerr=std, fmt="D", color=color, markersize=3.5, capsize=2, zorder=3)
    ax.set_yticks(range(len(labels)), [tick_name(label) for label in labels])
    for tick, label in zip(ax.get_yticklabels(), labels):
        tick.set_color(styles[label]["color"])
    ax.set_ylim(len(labels) - 0.5, -0.5)
    ax.set(xlabel="final test accuracy (%)")
    ax.grid(axis="y", visible=False)


@styled
def comparison_figure(curves: Mapping[str, Sequence[Rows]], title: str = "") -> Figure:
    """All arms' mean curves on one axis (one colour each), then every seed's final accuracy.

    `curves` maps an arm's label to its runs (one metrics list per seed); the first is the baseline.
    """
    styles = arm_styles(list(curves))
    fig, (curve_ax, final_ax) = new_figure(
        2, 3.6 + 0.38 * len(curves), height_ratios=[2.2, 0.25 + 0.18 * len(curves)]
    )
    _curves_panel(curve_ax, curves, styles)
    _final_panel(final_ax, curves, styles)
    seeds = max((len(runs) for runs in curves.values()), default=0)
    handles = curve_ax.get_legend_handles_labels()[0] + seed_key(seeds) + [
        Line2D([], [], color="0.4", marker="D", ls="", label="final: mean ± 1 std"),
        Line2D([], [], color="0.4", marker="o", ls="", alpha=0.6, label="final: one seed"),
    ]
    legend_below(fig, handles)
    fig.suptitle(wrapped(title or "comparison"))
    return fig


def plot_comparison(curves: Mapping[str, Sequence[Rows]], path: Path, title: str = "") -> list[Path]:
    return save(comparison_figure(curves, title), path)


# --- paired differences ----------------------------------------------------------------------------


def shared_range(panels: Mapping[str, Sequence[PairedSeries]]) -> tuple[float, float]:
    """One x range for every panel: all seeds, means and intervals, and 0, with a margin."""
    values = [0.0]
    for series in panels.values():
        for s in series:
            values += [*s.points, s.mean, *(v for v in (s.low, s.high) if v is not None)]
    low, high = min(values), max(values)
    margin = 0.08 * (high - low) or 0.5
    return low - margin, high + margin


def _paired_panel(
    ax: Axes, series: Sequence[PairedSeries], metric: str, colors: Sequence[str], name: Callable[[str], str]
) -> None:
    for y, (s, color) in enumerate(zip(series, colors)):
        ax.scatter(s.points, np.full(len(s.points), y), color=color, s=8, alpha=0.6, zorder=2)
        if s.low is not None and s.high is not None:
            ax.errorbar(s.mean, y, xerr=[[s.mean - s.low], [s.high - s.mean]], fmt="none", color=color,
                        capsize=2.5, lw=1.5)  # fmt: skip
        ax.scatter([s.mean], [y], marker="D", color=color, edgecolor="black", linewidths=0.5, s=18, zorder=3)
        equal = len(s.points) > 1 and max(s.points) - min(s.points) <= 1e-6 * max(1.0, abs(s.mean))
        flag = ("no CI: every seed the same" if equal else "no CI: 1 seed") if s.low is None else ""
        flag = flag or ("CI of zero width" if s.low == s.high else "")
        if flag:
            _flag(ax, s.mean, y, flag)
    ax.axvline(0, color="black", lw=0.8)
    ax.set_yticks(range(len(series)), [textwrap.fill(name(s.label), TICK_WIDTH) for s in series])
    ax.set_ylim(len(series) - 0.5, -0.5)
    ax.set_title(metric)
    ax.grid(axis="y", visible=False)


def _flag(ax: Axes, x: float, y: int, text: str) -> None:
    """A warning beside a drawn mean, on the side of the panel with room for it."""
    low, high = ax.get_xlim()
    right = x > (low + high) / 2
    ax.annotate(f"⚠ {text}", (x, y), xytext=(-5 if right else 5, 4), textcoords="offset points",
                ha="right" if right else "left", va="bottom", color=OKABE_ITO[4])  # fmt: skip


@styled
def paired_figure(
    panels: Mapping[str, Sequence[PairedSeries]],
    baseline: str,
    title: str = "",
    unit: str = "accuracy points",
    name: Callable[[str], str] = display_name,
    linear_within: float | None = None,
    xlabel: str | None = None,
    mean_name: str = "mean difference",
) -> Figure:
    """Per metric, each arm's difference from the baseline on the same seed (in `unit`), with its 95 % CI.
    `name`: an arm's label as the reader reads it (arms named as algorithms by default; a study's
    labels are already words). `linear_within`: a symmetric-log x axis, linear within ±that, for
    differences of several orders (a diverged seed beside differences of 0.01). `xlabel`: what the
    x axis holds where it is not "arm − baseline" in every panel; `mean_name`: what the diamond is.

    Every panel shares one x range; the arms keep the colours of the comparison figure (the
    baseline's black unused); an interval of zero width, or none, is flagged where it is drawn.
    """
    arms = max((len(s) for s in panels.values()), default=1)
    lines = max((len(textwrap.wrap(name(s.label), TICK_WIDTH)) for ss in panels.values() for s in ss), default=1)
    per_arm = max(0.22, 0.17 * lines)  # inches: a label of several lines keeps clear of the next
    fig, axes = new_figure(len(panels), 1.6 + (0.9 + per_arm * arms) * len(panels), sharex=True)
    labels = list(dict.fromkeys(s.label for series in panels.values() for s in series))
    styles = arm_styles([baseline, *labels])
    low, high = shared_range(panels)
    if linear_within is not None:
        axes[0].set_xscale("symlog", linthresh=linear_within)
        decades = [10.0**k for k in range(math.floor(math.log10(linear_within)) + 1, 3)]
        ticks = [t for t in [-d for d in decades[::-1]] + [0.0] + decades if low <= t <= high]
        axes[0].set_xticks(ticks, [f"{t:g}" for t in ticks])
    axes[0].set_xlim(low, high)  # shared: every panel has it before flags are placed
    for ax, (metric, series) in zip(axes, panels.items()):
        _paired_panel(ax, series, metric, [styles[s.label]["color"] for s in series], name)
    scale = "" if linear_within is None else f" (symmetric log axis, linear within ±{linear_within:g})"
    axes[-1].set_xlabel(f"{xlabel or 'arm − ' + name(baseline)}, {unit}{scale}")
    handles = [
        Line2D([], [], color="0.4", marker="o", ls="", alpha=0.6, label="one seed"),
        Line2D([], [], color="0.4", marker="D", markeredgecolor="black", ls="", label=mean_name),
        Line2D([], [], color="0.4", lw=1.5, label="95 % CI (Student's t)"),
    ]
    legend_below(fig, handles)
    fig.suptitle(wrapped(title or f"difference from {name(baseline)}"))
    return fig


def plot_paired(
    panels: Mapping[str, Sequence[PairedSeries]], baseline: str, path: Path, title: str = ""
) -> list[Path]:
    return save(paired_figure(panels, baseline, title), path)


# --- against the bytes sent ------------------------------------------------------------------------


def cumulative_bytes(rows: Rows, keys: Sequence[str]) -> np.ndarray:
    """Bytes of `keys` (bytes_up, bytes_down) sent in rounds 1..r, for each round r (rows in round order)."""
    return np.cumsum([sum(row.get(key) or 0 for key in keys) for row in rows], dtype=np.int64)


def _bytes_panel(
    ax: Axes, curves: Mapping[str, Sequence[Rows]], keys: Sequence[str], styles: Mapping[str, dict]
) -> None:
    """Each arm's mean accuracy (%) over seeds, its ± 1 std band and few seeds' lines, at the mean MB (10^6 bytes)
    its seeds had sent by each round that every seed evaluated."""
    for label, runs in curves.items():
        rounds, acc = seed_matrix(runs)
        if not len(rounds):
            continue
        mb = np.mean([cumulative_bytes(rows, keys)[rounds - 1] for rows in runs], axis=0) / 1e6
        mean_over_seeds(ax, mb, 100 * acc, label=display_name(label), marker="." if len(rounds) < 30 else None,
                        **styles[label])  # fmt: skip
    ax.set_xlim(left=0)
    ax.set_ylabel("test accuracy (%)")


@styled
def bytes_figure(
    curves: Mapping[str, Sequence[Rows]], traffic: Mapping[str, Sequence[str]], title: str = ""
) -> Figure:
    """The comparison figure's curves against the bytes sent instead of the round: one panel per
    kind of traffic (`traffic`: its name -> the metrics.jsonl keys summed), arms as there."""
    styles = arm_styles(list(curves))
    fig, axes = new_figure(len(traffic), 1.2 + 1.9 * len(traffic))
    for ax, (name, keys) in zip(axes, traffic.items()):
        _bytes_panel(ax, curves, keys, styles)
        ax.set_xlabel(f"MB sent, cumulative ({name})")
    seeds = max((len(runs) for runs in curves.values()), default=0)
    legend_below(fig, axes[0].get_legend_handles_labels()[0] + seed_key(seeds))
    fig.suptitle(wrapped(title or "accuracy against the bytes sent"))
    return fig


def plot_bytes(
    curves: Mapping[str, Sequence[Rows]], traffic: Mapping[str, Sequence[str]], path: Path, title: str = ""
) -> list[Path]:
    return save(bytes_figure(curves, traffic, title), path)


# --- one endpoint against another -------------------------------------------------------------------


class ArmPoint(NamedTuple):
    """One arm's seeds as (x, y) pairs of two endpoints; x None where the arm has none (no noise, no ε)."""

    label: str
    seeds: Sequence[tuple[float | None, float]]


@styled
def against_figure(lines: Mapping[str, Sequence[ArmPoint]], title: str, axis: tuple[str, str], xname: str) -> Figure:
    """Y against X (`axis`: their labels): each seed a dot, a line per axes point through its arms'
    means, each arm named once; an arm without an x (`None`: no privacy budget spent, ε infinite)
    is a dashed level across the panel, said in the key (`xname`: what it lacks), since it has no
    place on the x axis."""
    fig, axes = new_figure(1, 3.0)
    ax = axes[0]
    handles, named = [], set()
    for (name, arms), color in zip(lines.items(), OKABE_ITO[1:] + OKABE_ITO[:1]):
        means = []
        for arm in arms:
            ys = [y for _, y in arm.seeds]
            if any(x is None for x, _ in arm.seeds):
                handles.append(Line2D([], [], color=color, ls="--", label=f"{name}: {arm.label} (no {xname})"))
                ax.axhline(float(np.mean(ys)), color=color, ls="--", lw=1.0)
                continue
            xs = [float(x) for x, _ in arm.seeds if x is not None]
            ax.scatter(xs, ys, color=color, s=8, alpha=0.6, zorder=2)
            means.append((float(np.mean(xs)), float(np.mean(ys)), arm.label))
        means.sort()
        ax.plot([m[0] for m in means], [m[1] for m in means], color=color, marker="D", markersize=3.5, zorder=3)
        for x, y, label in (m for m in means if m[2] not in named):  # arms at one x in every line: named once
            ax.annotate(label, (x, y), xytext=(5, -10), textcoords="offset points", fontsize=7, color="0.3")
            named.add(label)
        handles.append(Line2D([], [], color=color, marker="D", markersize=3.5, label=f"{name}: mean over seeds"))
    ax.set_xlim(left=0)
    ax.set_ylim(bottom=0)
    ax.set_ylabel(axis[0])
    ax.set_xlabel(axis[1])
    legend_below(fig, [*handles, Line2D([], [], color="0.4", marker="o", ls="", alpha=0.6, label="one seed")])
    fig.suptitle(wrapped(title))
    return fig
