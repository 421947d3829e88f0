"""Figures a reader (or a reviewer) gets: one run's curves, a comparison of arms, paired differences.

Every figure is drawn for one column of a paper (3.3 in wide, no text under 7 pt) in one
matplotlib style (`STYLE`), and saved twice: a PNG to look at and a PDF beside it to print
(`save`). Accuracy is in percent everywhere, differences in percentage points. Round axes
count whole rounds from 1 to the run's last. Titles name the setting (data, model, clients,
Dirichlet alpha; lr, server and anchor ratio where one run has them); arms carry display names
(FedPFN, not `fedpfn`) and one colour-blind-safe colour each (Okabe-Ito), the same in every
figure of a comparison, with a legend that shows it. Spread is one sample standard deviation
over seeds (n-1) and says so; legends sit below the axes, off the data. Rounds without a test
accuracy (`null` in metrics.jsonl, not evaluated) are skipped. The `*_figure` functions return
the Figure so tests can inspect it before it is saved.
"""

from __future__ import annotations

import functools
import io
import textwrap
from collections.abc import Callable, Mapping, Sequence
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

from fedpfn.core.files import atomic_write_bytes  # noqa: E402

Rows = Sequence[Mapping[str, Any]]
BAND_TEXT = "± 1 std over seeds (n-1)"
COLUMN_WIDTH = 3.3  # inches: one column of a two-column paper
MIN_FONT_PT = 7
LEGEND_HALF = 24  # characters of a legend label that fit half a column at 7 pt
DPI = 200  # the PNG; the PDF is vector
VECTOR = "pdf"  # written beside every PNG
STYLE = {  # matplotlib rc settings for every figure here (a style, applied with plt.style.context)
    "font.size": 8, "axes.titlesize": 8, "axes.labelsize": 8, "figure.titlesize": 8,
    "xtick.labelsize": 7, "ytick.labelsize": 7, "legend.fontsize": 7, "legend.title_fontsize": 7,
    "lines.linewidth": 1.2, "lines.markersize": 3, "axes.linewidth": 0.6,
    "axes.grid": True, "grid.alpha": 0.3, "grid.linewidth": 0.5,
    "axes.spines.top": False, "axes.spines.right": False,
    "pdf.fonttype": 42, "svg.fonttype": "none",  # text stays text: editable, searchable
}  # fmt: skip
# Okabe & Ito's palette, safe for the common colour-vision deficiencies; black for the baseline
OKABE_ITO = ("#000000", "#E69F00", "#56B4E9", "#009E73", "#D55E00", "#0072B2", "#CC79A7", "#F0E442")
LINESTYLES = ("-", "--", ":", "-.")  # past 8 arms the colours repeat with another line style
NAMES = {
    "fedavg": "FedAvg", "fedprox": "FedProx", "scaffold": "SCAFFOLD", "feddyn": "FedDyn", "moon": "MOON",
    "fednova": "FedNova", "fedpfn": "FedPFN", "fedpnu": "FedPNU", "fedavgm": "FedAvgM", "fedadam": "FedAdam",
    "fedyogi": "FedYogi", "fedadagrad": "FedAdagrad",
}  # fmt: skip
SYMBOLS = {"anchor_ratio": "ρ", "alpha": "α", "prox_mu": "μ", "feddyn_alpha": "α_dyn", "moon_mu": "μ_moon"}
WORDS = {"anchor_schedule": "anchors", "anchor_masks": "masks", "anchor_granularity": "anchor level", "anchor_server_step": "anchor step",
         "server_lr": "server lr", "server_momentum": "server momentum", "local_epochs": "epochs"}  # fmt: skip


class PairedSeries(NamedTuple):
    """One arm's per-seed differences from the baseline, their mean and 95 % interval (points)."""

    label: str
    points: Sequence[float]
    mean: float
    low: float | None
    high: float | None


# --- names, titles, colours -----------------------------------------------------------------------


def algorithm_name(code: str) -> str:
    """'fedpfn+scaffold' -> 'FedPFN+SCAFFOLD'; a user's dotted strategy keeps its class name."""
    return "+".join(NAMES.get(part, part.rpartition(":")[2]) for part in code.split("+"))


def display_name(label: str) -> str:
    """An arm as a reader names it: 'fedpnu anchor_ratio=0.2' -> 'FedPNU (ρ = 0.2)',
    'fedpfn server=fedadam' -> 'FedPFN (server FedAdam)'."""
    head, *extras = label.split(" ")
    parts = []
    for extra in extras:
        key, _, value = extra.partition("=")
        value = algorithm_name(value) if key == "server" else value
        parts.append(f"{SYMBOLS[key]} = {value}" if key in SYMBOLS else f"{WORDS.get(key, key)} {value}")
    return algorithm_name(head) + (f" ({', '.join(parts)})" if parts else "")


def tick_name(label: str, width: int = 24) -> str:
    """An arm's name on a panel's y axis, in lines short enough to leave the panel its width."""
    return textwrap.fill(display_name(label), width)


def setting_text(config: Mapping[str, Any]) -> str:
    """The setting in a few words: 'fmnist cnn · 20 clients, 10 a round · Dirichlet α=0.5', then
    lr, server and anchor ratio when `config` has them (a run's config has, a comparison's shared
    setting has not: its arms' names carry them)."""
    partition = config.get("partition")
    if partition == "dirichlet":
        split = f"Dirichlet α={config.get('alpha')}"
    elif partition == "shards":
        split = f"{config.get('shards_per_client')} shards per client"
    else:
        split = str(partition).upper() if partition == "iid" else str(partition)
    parts = [
        f"{config.get('dataset')} {config.get('model')}",
        f"{config.get('num_clients')} clients, {config.get('clients_per_round')} a round",
        split,
    ]
    if "lr" in config:
        parts.append(f"lr {config['lr']}")
    if "server" in config:
        parts.append(f"server {algorithm_name(str(config['server']))}")
    if config.get("anchor_ratio") is not None and str(config.get("algorithm", "")).startswith(
        ("fedpfn", "fedpnu")
    ):
        parts.append(f"ρ={config['anchor_ratio']}")
    return " · ".join(parts)


def wrapped(title: str, width: int = 52) -> str:
    """A title in lines that fit a column at the title's size."""
    return "\n".join(textwrap.fill(line, width) for line in title.splitlines())


def arm_styles(labels: Sequence[str]) -> dict[str, dict[str, str]]:
    """A distinct (colour, line style) per arm, in the order given: the baseline first, in black."""
    return {
        label: {"color": OKABE_ITO[i % len(OKABE_ITO)], "linestyle": LINESTYLES[i // len(OKABE_ITO) % 4]}
        for i, label in enumerate(labels)
    }


# --- axes, figures, files --------------------------------------------------------------------------


def accuracy_points(rows: Rows, key: str = "test_accuracy") -> list[tuple[int, float]]:
    """(round, value) of the rounds that have a value: not-evaluated rounds hold null."""
    return [(int(r["round"]), float(r[key])) for r in rows if r.get(key) is not None]


def round_axis(ax: Axes, last: int) -> None:
    """Whole rounds, 1 to `last`: no 1.25 or 1.5 ticks, no round 0 or rounds past the run."""
    pad = max(0.5, 0.02 * last)
    ax.set_xlim(1 - pad, last + pad)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True, min_n_ticks=1))
    ax.set_xlabel("round")


def styled(draw: Callable[..., Figure]) -> Callable[..., Figure]:
    """`draw` with STYLE in force while it makes its figure (text and lines take it when made)."""

    @functools.wraps(draw)
    def in_style(*args: Any, **kwargs: Any) -> Figure:
        with plt.style.context(STYLE):
            return draw(*args, **kwargs)

    return in_style


def new_figure(rows: int, height: float, **kwargs: Any) -> tuple[Figure, np.ndarray]:
    """A column-wide figure of `rows` stacked axes."""
    fig, axes = plt.subplots(
        rows, 1, figsize=(COLUMN_WIDTH, height), layout="constrained", squeeze=False, **kwargs
    )
    return fig, axes[:, 0]


def figure_files(fig: Figure) -> dict[str, bytes]:
    """The figure as PNG and as PDF (its title as the PDF's title), then closed."""
    files = {}
    title = fig.get_suptitle().replace("\n", " ")
    for fmt in ("png", VECTOR):
        buffer = io.BytesIO()
        with plt.style.context(STYLE):
            fig.savefig(buffer, format=fmt, dpi=DPI, metadata={"Title": title} if fmt == "pdf" else None)
        files[fmt] = buffer.getvalue()
    plt.close(fig)
    return files


def save(fig: Figure, path: Path) -> list[Path]:
    """`path` (a .png) and its .pdf beside it, each written whole (no link followed); their paths."""
    written = []
    for fmt, data in figure_files(fig).items():
        target = path.with_suffix(f".{fmt}")
        atomic_write_bytes(target, data)
        written.append(target)
    return written


def legend_below(fig: Figure, handles: list[Any]) -> None:
    """Below the axes, off the data; two columns where the labels fit a column's half."""
    longest = max((len(h.get_label()) for h in handles), default=0)
    fig.legend(
        handles=handles, loc="outside lower center", ncols=2 if longest <= LEGEND_HALF else 1, frameon=False
    )


# --- one run ---------------------------------------------------------------------------------------

LOCAL_SERIES = (  # (metrics.jsonl key, label, colour, line style): recorded with --local-test-fraction
    ("local_accuracy_before_mean", "local test, before training (mean)", OKABE_ITO[1], "--"),
    ("local_accuracy_after_mean", "local test, after training (mean)", OKABE_ITO[3], "--"),
    ("local_accuracy_after_worst10", "local test, after training (worst 10 %)", OKABE_ITO[4], ":"),
)


def _percent_series(ax: Axes, rows: Rows, key: str, label: str, **style: Any) -> bool:
    points = accuracy_points(rows, key)
    if points:
        rounds, values = zip(*points)
        ax.plot(rounds, [100 * v for v in values], marker=".", label=label, **style)
    return bool(points)


@styled
def run_figure(rows: Rows, title: str = "", config: Mapping[str, Any] | None = None) -> Figure:
    """Accuracy (the server's test set, and each client's local split before and after training
    when recorded) over loss, against the round."""
    fig, (acc_ax, loss_ax) = new_figure(2, 4.0, sharex=True)
    split = "val" if any(r.get("val_accuracy") is not None for r in rows) else "test"
    _percent_series(acc_ax, rows, f"{split}_accuracy", f"global model, server {split} set", color="black")
    for key, label, color, style in LOCAL_SERIES:
        _percent_series(acc_ax, rows, key, label, color=color, linestyle=style)
    acc_ax.set(ylabel="accuracy (%)")
    for key, label, color in ((f"{split}_loss", f"{split} loss (server)", OKABE_ITO[5]),
                              ("train_loss", "train loss (mean over clients)", OKABE_ITO[6])):  # fmt: skip
        points = accuracy_points(rows, key)
        if points:
            loss_ax.plot(*zip(*points), marker=".", label=label, color=color)
    loss_ax.set(ylabel="cross-entropy")
    round_axis(loss_ax, max((int(r["round"]) for r in rows), default=1))
    handles = acc_ax.get_legend_handles_labels()[0] + loss_ax.get_legend_handles_labels()[0]
    legend_below(fig, handles)
    setting = f"\n{setting_text(config)}" if config else ""
    fig.suptitle(wrapped((title or "run") + setting))
    return fig


def plot_run(rows: Rows, path: Path, title: str = "", config: Mapping[str, Any] | None = None) -> list[Path]:
    """Save `run_figure` as `path` (PNG) and PDF (the server calls this when a run ends)."""
    return save(run_figure(rows, title, config), path)


# --- a comparison -----------------------------------------------------------------------------------


def seed_matrix(runs: Sequence[Rows]) -> tuple[np.ndarray, np.ndarray]:
    """Rounds evaluated in every run, and the accuracy of each run (row) at those rounds."""
    per_run = [dict(accuracy_points(rows)) for rows in runs]
    common = sorted(set.intersection(*(set(p) for p in per_run))) if per_run else []
    acc = np.array([[p[r] for r in common] for p in per_run], dtype=float).reshape(len(per_run), len(common))
    return np.array(common, dtype=int), acc


def mean_band(acc: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
    """Mean over seeds and the n-1 standard deviation (None for a single seed)."""
    return acc.mean(0), (acc.std(0, ddof=1) if acc.shape[0] > 1 else None)


def _curves_panel(ax: Axes, curves: Mapping[str, Sequence[Rows]], styles: Mapping[str, dict]) -> None:
    """Each arm's mean accuracy (%) over seeds, with its ± 1 std band."""
    last = 1
    for label, runs in curves.items():
        rounds, acc = seed_matrix(runs)
        if not len(rounds):
            continue
        mean, std = mean_band(100 * acc)
        ax.plot(
            rounds, mean, label=display_name(label), marker="." if len(rounds) < 30 else None, **styles[label]
        )
        if std is not None:
            ax.fill_between(rounds, mean - std, mean + std, color=styles[label]["color"], alpha=0.15, lw=0)
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
    handles = curve_ax.get_legend_handles_labels()[0] + [
        Patch(color="0.6", alpha=0.3, label=BAND_TEXT if seeds > 1 else "no band: 1 seed"),
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


def _paired_panel(ax: Axes, series: Sequence[PairedSeries], metric: str, colors: Sequence[str]) -> None:
    for y, (s, color) in enumerate(zip(series, colors)):
        ax.scatter(s.points, np.full(len(s.points), y), color=color, s=8, alpha=0.6, zorder=2)
        if s.low is not None and s.high is not None:
            ax.errorbar(s.mean, y, xerr=[[s.mean - s.low], [s.high - s.mean]], fmt="none", color=color,
                        capsize=2.5, lw=1.5)  # fmt: skip
        ax.scatter([s.mean], [y], marker="D", color=color, edgecolor="black", linewidths=0.5, s=18, zorder=3)
        flag = "no CI: 1 seed" if s.low is None else "CI of zero width" if s.low == s.high else ""
        if flag:
            _flag(ax, s.mean, y, flag)
    ax.axvline(0, color="black", lw=0.8)
    ax.set_yticks(range(len(series)), [tick_name(s.label) for s in series])
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
def paired_figure(panels: Mapping[str, Sequence[PairedSeries]], baseline: str, title: str = "") -> Figure:
    """Per metric, each arm's difference from the baseline on the same seed, with its 95 % CI.

    Every panel shares one x range; the arms keep the colours of the comparison figure (the
    baseline's black unused); an interval of zero width, or none, is flagged where it is drawn.
    """
    arms = max((len(s) for s in panels.values()), default=1)
    fig, axes = new_figure(len(panels), 1.6 + (0.9 + 0.22 * arms) * len(panels), sharex=True)
    labels = list(dict.fromkeys(s.label for series in panels.values() for s in series))
    styles = arm_styles([baseline, *labels])
    axes[0].set_xlim(*shared_range(panels))  # shared: every panel has it before flags are placed
    for ax, (metric, series) in zip(axes, panels.items()):
        _paired_panel(ax, series, metric, [styles[s.label]["color"] for s in series])
    axes[-1].set_xlabel(f"arm − {display_name(baseline)}, accuracy points")
    handles = [
        Line2D([], [], color="0.4", marker="o", ls="", alpha=0.6, label="one seed"),
        Line2D([], [], color="0.4", marker="D", markeredgecolor="black", ls="", label="mean difference"),
        Line2D([], [], color="0.4", lw=1.5, label="95 % CI (Student's t)"),
    ]
    legend_below(fig, handles)
    fig.suptitle(wrapped(title or f"difference from {display_name(baseline)}"))
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
    """Each arm's mean accuracy (%) over seeds, with its ± 1 std band, at the mean MB (10^6 bytes)
    its seeds had sent by each round that every seed evaluated."""
    for label, runs in curves.items():
        rounds, acc = seed_matrix(runs)
        if not len(rounds):
            continue
        mb = np.mean([cumulative_bytes(rows, keys)[rounds - 1] for rows in runs], axis=0) / 1e6
        mean, std = mean_band(100 * acc)
        ax.plot(
            mb, mean, label=display_name(label), marker="." if len(rounds) < 30 else None, **styles[label]
        )
        if std is not None:
            ax.fill_between(mb, mean - std, mean + std, color=styles[label]["color"], alpha=0.15, lw=0)
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
    band = Patch(color="0.6", alpha=0.3, label=BAND_TEXT if seeds > 1 else "no band: 1 seed")
    legend_below(fig, axes[0].get_legend_handles_labels()[0] + [band])
    fig.suptitle(wrapped(title or "accuracy against the bytes sent"))
    return fig


def plot_bytes(
    curves: Mapping[str, Sequence[Rows]], traffic: Mapping[str, Sequence[str]], path: Path, title: str = ""
) -> list[Path]:
    return save(bytes_figure(curves, traffic, title), path)
