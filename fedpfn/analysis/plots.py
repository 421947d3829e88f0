"""Figures a person reads: one run's curves, a comparison of arms, paired differences.

Every figure says which setting it shows (in its title), counts rounds in whole numbers,
draws spread as one sample standard deviation over seeds (n-1) and says so, keeps legends
off the data (below the axes), and stays readable with 8 arms (one small panel per arm).
Rounds without a test accuracy (`null` in metrics.jsonl, not evaluated) are skipped.
The `*_figure` functions return the Figure so tests can inspect it before it is saved.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import matplotlib
import numpy as np

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.axes import Axes  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

Rows = Sequence[Mapping[str, Any]]
BAND_TEXT = "± 1 std over seeds (n-1)"
DPI = 120


class PairedSeries(NamedTuple):
    """One arm's per-seed differences from the baseline, their mean and 95 % interval."""

    label: str
    points: Sequence[float]
    mean: float
    low: float | None
    high: float | None


def setting_text(config: Mapping[str, Any]) -> str:
    """The setting in a few words, for titles: 'fmnist cnn · 20 clients, 10 a round · Dirichlet 0.5'."""
    partition = config.get("partition")
    if partition == "dirichlet":
        split = f"Dirichlet {config.get('alpha')}"
    elif partition == "shards":
        split = f"{config.get('shards_per_client')} shards per client"
    else:
        split = str(partition).upper() if partition == "iid" else str(partition)
    return (
        f"{config.get('dataset')} {config.get('model')} · {config.get('num_clients')} clients, "
        f"{config.get('clients_per_round')} a round · {split}"
    )


def accuracy_points(rows: Rows, key: str = "test_accuracy") -> list[tuple[int, float]]:
    """(round, value) of the rounds that have a value: not-evaluated rounds hold null."""
    return [(int(r["round"]), float(r[key])) for r in rows if r.get(key) is not None]


def integer_rounds(ax: Axes) -> None:
    """Round axes count whole rounds: no 1.25, 1.5 ticks."""
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("round")
    ax.grid(alpha=0.3)


def _plot_series(ax: Axes, rows: Rows, key: str, **style: Any) -> None:
    points = accuracy_points(rows, key)
    if points:
        ax.plot(*zip(*points), marker=".", **style)


def run_figure(rows: Rows, title: str = "") -> Figure:
    """Test accuracy (left) and test/train loss (right) against the round."""
    fig, (acc_ax, loss_ax) = plt.subplots(1, 2, figsize=(10, 4.2), layout="constrained")
    _plot_series(acc_ax, rows, "test_accuracy", color="C0")
    acc_ax.set(ylabel="test accuracy", title="accuracy (evaluated rounds)")
    _plot_series(loss_ax, rows, "test_loss", color="C1", label="test (server)")
    _plot_series(loss_ax, rows, "train_loss", color="C2", label="train (mean over clients)")
    loss_ax.set(ylabel="cross-entropy", title="loss")
    for ax in (acc_ax, loss_ax):
        integer_rounds(ax)
    fig.legend(*loss_ax.get_legend_handles_labels(), loc="outside lower center", ncols=2, frameon=False)
    fig.suptitle(title or "run")
    return fig


def plot_run(rows: Rows, path: Path, title: str = "") -> None:
    """Save `run_figure` to `path` (the server calls this when a run ends)."""
    save(run_figure(rows, title), path)


def save(fig: Figure, path: Path) -> None:
    fig.savefig(path, dpi=DPI)
    plt.close(fig)


def seed_matrix(runs: Sequence[Rows]) -> tuple[np.ndarray, np.ndarray]:
    """Rounds evaluated in every run, and the accuracy of each run (row) at those rounds."""
    per_run = [dict(accuracy_points(rows)) for rows in runs]
    common = sorted(set.intersection(*(set(p) for p in per_run))) if per_run else []
    acc = np.array([[p[r] for r in common] for p in per_run], dtype=float).reshape(len(per_run), len(common))
    return np.array(common, dtype=int), acc


def mean_band(acc: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
    """Mean over seeds and the n-1 standard deviation (None for a single seed)."""
    return acc.mean(0), (acc.std(0, ddof=1) if acc.shape[0] > 1 else None)


def grid_shape(panels: int) -> tuple[int, int]:
    """Rows and columns of a near-square grid: 2 -> 1x2, 4 -> 2x2, 9 -> 3x3."""
    cols = panels if panels <= 2 else math.ceil(math.sqrt(panels))
    return math.ceil(panels / cols), cols


def _arm_panel(ax: Axes, label: str, color: str, means: Mapping[str, tuple], own: tuple) -> None:
    """One arm in colour over every arm's mean in faint grey, so each panel compares."""
    for other, (rounds, mean, _) in means.items():
        if other != label and len(rounds):
            ax.plot(rounds, mean, color="0.75", lw=1, zorder=1)
    rounds, mean, std = own
    if len(rounds):
        ax.plot(rounds, mean, color=color, lw=2, marker="." if len(rounds) < 30 else None, zorder=3)
    if std is not None and len(rounds):
        ax.fill_between(rounds, mean - std, mean + std, color=color, alpha=0.25, lw=0, zorder=2)
    ax.set_title(label, fontsize=10)
    ax.set_ylabel("test accuracy")
    integer_rounds(ax)


def _final_panel(ax: Axes, curves: Mapping[str, Sequence[Rows]], colors: Mapping[str, str]) -> None:
    """Final accuracy of every seed (dots) and its mean ± n-1 std (bar), one line per arm."""
    labels = list(curves)
    for y, label in enumerate(labels):
        finals = np.array([points[-1][1] for points in map(accuracy_points, curves[label]) if points])
        ax.scatter(finals, np.full(len(finals), y), color=colors[label], s=14, alpha=0.6, zorder=2)
        std = finals.std(ddof=1) if len(finals) > 1 else 0.0
        ax.errorbar(finals.mean(), y, xerr=std, fmt="D", color=colors[label], capsize=3, zorder=3)
    ax.set_yticks(range(len(labels)), labels, fontsize=8)
    ax.invert_yaxis()
    ax.set(xlabel="final test accuracy", title="final accuracy per seed")
    ax.grid(alpha=0.3, axis="x")


def _legend_handles(seeds: int, arms: int) -> list[Any]:
    band = BAND_TEXT if seeds > 1 else "no band: 1 seed"
    others = [Line2D([], [], color="0.75", lw=1, label="the other arms (means)")] if arms > 1 else []
    return [
        Line2D([], [], color="C0", lw=2, label=f"mean over {seeds} seed{'s' * (seeds != 1)}"),
        Patch(color="C0", alpha=0.25, label=band),
        *others,
        Line2D([], [], color="C0", marker="D", ls="", label="final: mean ± 1 std (n-1); dots: seeds"),
    ]


def comparison_figure(curves: Mapping[str, Sequence[Rows]], title: str = "") -> Figure:
    """Small multiples: one panel per arm over all arms' means, then the final accuracies.

    `curves` maps an arm's label to its runs (one metrics list per seed).
    """
    labels = list(curves)
    nrows, ncols = grid_shape(len(labels) + 1)
    size = (3.6 * ncols, 2.9 * nrows + 0.9)
    fig, axes = plt.subplots(nrows, ncols, figsize=size, layout="constrained", squeeze=False)
    flat = list(axes.flat)
    colors = {label: f"C{i % 10}" for i, label in enumerate(labels)}
    means = {}
    for label in labels:
        rounds, acc = seed_matrix(curves[label])
        means[label] = (rounds, *mean_band(acc))
    for ax, label in zip(flat, labels):
        _arm_panel(ax, label, colors[label], means, means[label])
        if ax is not flat[0]:
            ax.sharey(flat[0])
    _final_panel(flat[len(labels)], curves, colors)
    for ax in flat[len(labels) + 1 :]:
        ax.set_axis_off()
    seeds = max((len(runs) for runs in curves.values()), default=0)
    legend_cols = 4 if ncols >= 3 else 2  # a narrow figure stacks the legend, never clips it
    handles = _legend_handles(seeds, len(labels))
    fig.legend(handles=handles, loc="outside lower center", ncols=legend_cols, frameon=False, fontsize=8)
    fig.suptitle(title or "comparison")
    return fig


def plot_comparison(curves: Mapping[str, Sequence[Rows]], path: Path, title: str = "") -> None:
    save(comparison_figure(curves, title), path)


def _paired_panel(ax: Axes, series: Sequence[PairedSeries], metric: str, baseline: str) -> None:
    for y, s in enumerate(series):
        color = f"C{(y + 1) % 10}"
        ax.scatter(s.points, np.full(len(s.points), y), color=color, s=16, alpha=0.6, zorder=2)
        if s.low is not None and s.high is not None:
            xerr = [[s.mean - s.low], [s.high - s.mean]]
            ax.errorbar(s.mean, y, xerr=xerr, fmt="none", color=color, capsize=4, lw=2)
        ax.scatter([s.mean], [y], marker="D", color=color, edgecolor="black", s=40, zorder=3)
    ax.axvline(0, color="black", lw=1)
    ax.set_yticks(range(len(series)), [s.label for s in series], fontsize=8)
    ax.set_ylim(len(series) - 0.5, -0.5)
    ax.set(xlabel=f"accuracy points, arm − {baseline}", title=metric)
    ax.grid(alpha=0.3, axis="x")


def paired_figure(panels: Mapping[str, Sequence[PairedSeries]], baseline: str, title: str = "") -> Figure:
    """Per metric, each arm's difference from the baseline on the same seed, with its 95 % CI."""
    arms = max((len(s) for s in panels.values()), default=1)
    size = (5 * len(panels), 2.2 + 0.45 * arms)
    fig, axes = plt.subplots(1, len(panels), figsize=size, layout="constrained", squeeze=False)
    for ax, (metric, series) in zip(axes.flat, panels.items()):
        _paired_panel(ax, series, metric, baseline)
    handles = [
        Line2D([], [], color="0.4", marker="o", ls="", alpha=0.6,
               label="one seed (same partition and sampling)"),
        Line2D([], [], color="0.4", marker="D", markeredgecolor="black", ls="", label="mean difference"),
        Line2D([], [], color="0.4", lw=2, label="95 % CI, Student's t, n-1 df"),
    ]
    fig.legend(handles=handles, loc="outside lower center", ncols=3, frameon=False, fontsize=8)
    fig.suptitle(title or f"difference from {baseline}")
    return fig


def plot_paired(
    panels: Mapping[str, Sequence[PairedSeries]], baseline: str, path: Path, title: str = ""
) -> None:
    save(paired_figure(panels, baseline, title), path)
