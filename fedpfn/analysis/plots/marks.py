"""What the lines of a figure mean, drawn and said the same way in every figure: a mean over seeds
with its band and, where the seeds are few, each seed's own line; and a key that says what solid,
dashed, dotted and thin lines stand for (the arms' colours are said by their own legend entries)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from fedpfn.analysis.plots.style import BAND_TEXT, legend_below, wrapped

SEED_LINES_MAX = 5  # a mean over this many seeds or fewer is drawn with each seed's own line beside it
SEED_WIDTH, SEED_ALPHA, SEED_Z = 0.5, 0.45, 1.5  # a seed's line: thin and faint, under its mean
KEY_GREY = "0.35"  # the key's lines: grey, since they stand for every arm's colour
STYLE_WORDS = {"-": "solid", "--": "dashed", ":": "dotted", "-.": "dash-dot"}


def seed_lines(ax: Axes, x: Sequence[float], per_seed: np.ndarray, color: str, linestyle: str = "-") -> int:
    """Each seed's own line (a row of `per_seed`), thin, where there are at most SEED_LINES_MAX:
    a mean of few seeds hides how far apart they are. How many were drawn."""
    if len(per_seed) > SEED_LINES_MAX:
        return 0
    for row in per_seed:
        ax.plot(x, row, color=color, linestyle=linestyle, linewidth=SEED_WIDTH, alpha=SEED_ALPHA,
                zorder=SEED_Z)  # fmt: skip
    return len(per_seed)


def mean_over_seeds(
    ax: Axes, x: Sequence[float], per_seed: Sequence[Sequence[float]], color: str, label: str | None = None,
    linestyle: str = "-", marker: str | None = None, band: bool = True,
) -> np.ndarray:  # fmt: skip
    """The mean over seeds (rows), its ± 1 std band (n − 1; none for one seed) and each seed's line
    for few seeds (`seed_lines`); the mean drawn."""
    values = np.asarray(per_seed, dtype=float).reshape(len(per_seed), -1)
    mean = values.mean(0)
    ax.plot(x, mean, label=label, color=color, linestyle=linestyle, marker=marker)
    if band and len(values) > 1:
        std = values.std(0, ddof=1)
        ax.fill_between(x, mean - std, mean + std, color=color, alpha=0.15, linewidth=0)
    seed_lines(ax, x, values, color, linestyle)
    return mean


def line_key(meanings: Sequence[tuple[str, str]]) -> list[Line2D]:
    """Grey key entries, one per line style: (style, meaning) -> 'solid: as trained'."""
    return [Line2D([], [], color=KEY_GREY, linestyle=style, label=f"{STYLE_WORDS[style]}: {meaning}")
            for style, meaning in meanings]  # fmt: skip


def seed_key(seeds: int, one: str = "one seed", band: bool = True) -> list[Any]:
    """The key for a mean over `seeds`: its band (or why none) and, for few seeds, the thin lines."""
    found: list[Any] = []
    if band:
        found.append(Patch(color="0.6", alpha=0.3, label=BAND_TEXT if seeds > 1 else f"no band: {one}"))
    if 1 < seeds <= SEED_LINES_MAX:
        label = f"thin: {one}"
        found.append(Line2D([], [], color=KEY_GREY, linewidth=SEED_WIDTH, alpha=0.7, label=label))
    return found


def finish(fig: Figure, handles: list[Any], title: str) -> Figure:
    """The key below the axes and the title above them, wrapped to the column (see `save`)."""
    legend_below(fig, handles)
    fig.suptitle(wrapped(title))
    return fig


def key_texts(fig: Figure) -> list[str]:
    """Every entry of the figure's keys, as a reader sees them (tests read a figure's key here)."""
    legends = [*fig.legends, *(ax.get_legend() for ax in fig.axes if ax.get_legend())]
    return [text.get_text() for legend in legends for text in legend.get_texts()]
