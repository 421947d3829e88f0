"""Write a partition's per-client label counts as JSON and as a stacked bar chart (PNG and PDF).

Both outputs let a run's data skew be checked after the fact without
re-running the partitioner.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib import colormaps, rc_context
from matplotlib.axes import Axes
from matplotlib.cm import ScalarMappable
from matplotlib.collections import PolyCollection
from matplotlib.colors import Normalize
from matplotlib.figure import Figure
from matplotlib.patches import Patch
from matplotlib.ticker import MaxNLocator

from partitions.dirichlet import PartitionError

MAX_PLOTTED_CLIENTS = 100
MAX_LEGEND_CLASSES = 20
COLUMN_WIDTH = 3.3  # inches: one column of a paper, as fedpfn.analysis.plots draws
STYLE = {"font.size": 8, "axes.titlesize": 8, "axes.labelsize": 8, "xtick.labelsize": 7, "ytick.labelsize": 7,
         "legend.fontsize": 7, "pdf.fonttype": 42}  # fmt: skip


def check_counts(counts: np.ndarray) -> np.ndarray:
    """Return ``counts`` as a (clients, classes) array, or raise if it cannot be one."""
    counts = np.asarray(counts)
    if counts.ndim != 2 or counts.shape[0] == 0 or counts.shape[1] == 0:
        raise PartitionError(
            f"counts has shape {counts.shape}; pass the (num_clients, num_classes) table from label_counts"
        )
    return counts


def write_partition_json(path: str | os.PathLike, counts: np.ndarray) -> None:
    """Write ``{"clients": [{"id": i, "label_counts": [...]}, ...]}`` with plain ints."""
    counts = check_counts(counts)
    doc = {"clients": [{"id": i, "label_counts": row} for i, row in enumerate(counts.astype(int).tolist())]}
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc) + "\n")


def plot_partition(
    path: str | os.PathLike,
    counts: np.ndarray,
    class_names: Sequence[str] | None = None,
    title: str | None = None,
) -> list[Path]:
    """Save `partition_figure` as `path` (PNG) and as a PDF beside it; the two paths."""
    fig = partition_figure(counts, class_names, title)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    written = [path, path.with_suffix(".pdf")]
    with rc_context(STYLE):
        for target in written:
            metadata = (
                {"Title": fig.axes[0].get_title().replace("\n", " ")} if target.suffix == ".pdf" else None
            )
            fig.savefig(target, dpi=200, metadata=metadata)
    return written


def partition_figure(
    counts: np.ndarray, class_names: Sequence[str] | None = None, title: str | None = None
) -> Figure:
    """Stacked bars of label counts per client, one colour per class, one column of a paper wide.

    Sized for 3.3 in with text of 7-8 pt. `class_names` label the legend (default: class 0,
    1, ...); `title` says which split it is (the run's Dirichlet alpha). A bare ``Figure``
    (Agg canvas) rather than pyplot: it works headless and leaves no global state behind.
    Only the first 100 clients are drawn; past that the bars would be thinner than a pixel,
    and the title says so.
    """
    counts = check_counts(counts)
    num_clients, num_classes = counts.shape
    names = list(class_names) if class_names is not None else [f"class {c}" for c in range(num_classes)]
    if len(names) != num_classes:
        raise PartitionError(f"class_names has {len(names)} names for {num_classes} classes")
    shown = counts[:MAX_PLOTTED_CLIENTS]
    colours, cmap = _class_colours(num_classes)
    legend_rows = math.ceil(min(num_classes, MAX_LEGEND_CLASSES) / 3)
    with rc_context(STYLE):
        fig = Figure(figsize=(COLUMN_WIDTH, 2.4 + 0.16 * legend_rows), layout="constrained")
        ax = fig.add_subplot()
        _bars(ax, shown, colours)
        first = f"first {len(shown)} of " if num_clients > len(shown) else ""
        ax.set_title(
            f"Label counts per client ({first}{num_clients} clients)" + (f"\n{title}" if title else "")
        )
        if num_classes <= MAX_LEGEND_CLASSES:
            handles = [Patch(color=colours[c], label=names[c]) for c in range(num_classes)]
            fig.legend(handles=handles, loc="outside lower center", ncols=3, frameon=False)
        else:
            fig.colorbar(ScalarMappable(Normalize(0, num_classes - 1), cmap), ax=ax, label="class")
    return fig


def _class_colours(num_classes: int) -> tuple[Any, Any]:
    """Qualitative palettes keep up to 20 classes apart; beyond that a gradient and a colour bar."""
    if num_classes <= MAX_LEGEND_CLASSES:
        cmap = colormaps["tab10" if num_classes <= 10 else "tab20"]
        return cmap.colors[:num_classes], cmap
    cmap = colormaps["viridis"]
    return cmap(np.linspace(0.0, 1.0, num_classes)), cmap


def _bars(ax: Axes, shown: np.ndarray, colours: Any) -> None:
    """One PolyCollection of the non-empty segments instead of one Rectangle per (client, class):
    100 clients x 100 classes stays well under a second."""
    client, cls = np.nonzero(shown)
    tops = np.cumsum(shown, axis=1)[client, cls]
    bottoms = tops - shown[client, cls]
    left, right = client - 0.45, client + 0.45
    corners = np.stack([[left, bottoms], [right, bottoms], [right, tops], [left, tops]]).transpose(2, 0, 1)
    ax.add_collection(PolyCollection(corners, facecolors=np.asarray(colours)[cls], linewidths=0))
    ax.set_ylim(0, max(int(shown.sum(axis=1).max()), 1) * 1.05)
    ax.set_xlim(-0.6, len(shown) - 0.4)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("client")
    ax.set_ylabel("training samples")
