"""The one style every figure is drawn in, and what the figures share: names, titles, colours,
column-wide axes, and PNG + PDF files written whole (see fedpfn.analysis.plots)."""

from __future__ import annotations

import functools
import io
import textwrap
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import matplotlib
import numpy as np

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.text import Text
from matplotlib.ticker import MaxNLocator

from fedpfn.core.files import atomic_write_bytes

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


def placed_texts(fig: Figure) -> list[Text]:
    """The texts a layout does not shrink to fit: titles, axis labels, keys, notes on the axes."""
    texts = [fig._suptitle] if fig._suptitle is not None else []
    for ax in fig.axes:
        texts += [ax.title, ax._left_title, ax._right_title, ax.xaxis.label, ax.yaxis.label, *ax.texts]
        texts += ax.get_legend().get_texts() if ax.get_legend() else []
    for legend in fig.legends:
        texts += [*legend.get_texts(), legend.get_title()]
    return [t for t in texts if t.get_visible() and t.get_text().strip()]


def outside_canvas(fig: Figure) -> list[str]:
    """The texts that the saved file would cut at its edge (laid out as when saved), each as written."""
    fig.canvas.draw()  # constrained layout places everything on a draw
    box, renderer = fig.bbox, fig.canvas.get_renderer()
    found = []
    for text in placed_texts(fig):
        ext = text.get_window_extent(renderer)
        if ext.x0 < box.x0 - 1 or ext.x1 > box.x1 + 1 or ext.y0 < box.y0 - 1 or ext.y1 > box.y1 + 1:
            found.append(text.get_text())
    return found


def keep_inside(fig: Figure, tries: int = 4) -> Figure:
    """Every text that runs past the canvas wrapped onto more, shorter lines until it fits (a label
    cut at the edge is a label lost; a layout makes room around texts but cannot narrow one). Each
    try wraps the text as first written, so a line broken once is not broken again word by word."""
    written = {text: text.get_text().splitlines() for text in placed_texts(fig)}
    for _ in range(tries):
        if not outside_canvas(fig):
            break
        box, renderer = fig.bbox, fig.canvas.get_renderer()
        for text in placed_texts(fig):
            ext = text.get_window_extent(renderer)
            shrink = min(1.0, box.width / max(ext.width, 1), box.height / max(ext.height, 1))
            inside = box.x0 <= ext.x0 and ext.x1 <= box.x1 and box.y0 <= ext.y0 and ext.y1 <= box.y1
            if not inside:
                lines = text.get_text().splitlines()
                width = max(8, int(max(map(len, lines)) * min(shrink, 0.85)))
                text.set_text("\n".join(textwrap.fill(line, width) for line in written.get(text, lines)))
    return fig


def figure_files(fig: Figure) -> dict[str, bytes]:
    """The figure as PNG and as PDF (its title as the PDF's title), texts kept inside, then closed."""
    files = {}
    with plt.style.context(STYLE):
        keep_inside(fig)
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
