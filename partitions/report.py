"""Write a partition's per-client label counts as JSON and as a stacked bar chart.

Both outputs let a run's data skew be checked after the fact without
re-running the partitioner.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
from matplotlib import colormaps
from matplotlib.cm import ScalarMappable
from matplotlib.collections import PolyCollection
from matplotlib.colors import Normalize
from matplotlib.figure import Figure
from matplotlib.patches import Patch
from matplotlib.ticker import MaxNLocator

from partitions.dirichlet import PartitionError

MAX_PLOTTED_CLIENTS = 100
MAX_LEGEND_CLASSES = 20


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


def plot_partition(path: str | os.PathLike, counts: np.ndarray) -> None:
    """Save stacked bars of label counts per client (one colour per class) as an image.

    Uses a bare ``Figure`` (Agg canvas) rather than pyplot so it works headless
    and leaves no global state behind. Only the first 100 clients are drawn;
    past that the bars would be thinner than a pixel, and the title says so.
    """
    counts = check_counts(counts)
    num_clients, num_classes = counts.shape
    shown = counts[:MAX_PLOTTED_CLIENTS]
    # Qualitative palettes keep up to 20 classes distinguishable; beyond that a gradient plus colour bar.
    if num_classes <= MAX_LEGEND_CLASSES:
        cmap = colormaps["tab10" if num_classes <= 10 else "tab20"]
        colours = cmap.colors[:num_classes]
    else:
        cmap = colormaps["viridis"]
        colours = cmap(np.linspace(0.0, 1.0, num_classes))

    fig = Figure(figsize=(max(6.0, 0.12 * len(shown) + 3.0), 4.5), layout="constrained")
    ax = fig.add_subplot()
    # One PolyCollection of the non-empty segments instead of one Rectangle per
    # (client, class): 100 clients x 100 classes stays well under a second.
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
    ax.set_ylabel("samples")
    title = f"Label counts per client ({num_clients} clients)"
    if num_clients > len(shown):
        title = f"Label counts, first {len(shown)} of {num_clients} clients"
    ax.set_title(title)

    if num_classes <= MAX_LEGEND_CLASSES:
        handles = [Patch(color=colours[c], label=str(c)) for c in range(num_classes)]
        fig.legend(handles=handles, title="class", loc="outside right upper", fontsize="small")
    else:
        fig.colorbar(ScalarMappable(Normalize(0, num_classes - 1), cmap), ax=ax, label="class")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
