"""Figures a reader (or a reviewer) gets: one run's curves, a comparison of arms, paired differences.

Every figure is drawn for one column of a paper (3.3 in wide, no text under 7 pt) in one
matplotlib style (`STYLE`), and saved twice: a PNG to look at and a PDF beside it to print
(`save`). Accuracy is in percent everywhere, differences in percentage points. Round axes
count whole rounds from 1 to the run's last. Titles name the setting (data, model, clients,
Dirichlet alpha; lr, server and anchor ratio where one run has them); arms carry display names
(FedPFN, not `fedpfn`) and one colour-blind-safe colour each (Okabe-Ito), the same in every
figure of a comparison, with a legend that shows it. Spread is one sample standard deviation
over seeds (n-1) and says so; where a mean is over 5 seeds or fewer, each seed's own line is drawn
thin beside it (`marks.SEED_LINES_MAX`); a key says what solid, dashed, dotted and thin lines
stand for; keys sit below the axes, off the data, and every text is kept inside the canvas
(`keep_inside`: wrapped where it would run past the edge, as every `save` does). Rounds without a test
accuracy (`null` in metrics.jsonl, not evaluated) are skipped. The `*_figure` functions return
the Figure so tests can inspect it before it is saved.

The package: `style` (the rc style, palette, names and titles, column-wide axes, texts kept
inside, files written whole: what every figure here and fedpfn.analysis's other figures share),
`marks` (a mean over seeds with its band and few seeds' own lines, the key of line styles, the
key and title placed: what every figure draws its lines and keys with), `run` (one run's figure,
drawn when a run ends) and `arms` (a comparison's figures). Everything is
importable from `fedpfn.analysis.plots` as before.
"""

from __future__ import annotations

from fedpfn.analysis.plots.arms import (
    ArmPoint,
    PairedSeries,
    against_figure,
    bytes_figure,
    comparison_figure,
    cumulative_bytes,
    paired_figure,
    plot_bytes,
    plot_comparison,
    plot_paired,
    seed_matrix,
)
from fedpfn.analysis.plots.marks import (
    SEED_LINES_MAX,
    finish,
    key_texts,
    line_key,
    mean_over_seeds,
    seed_key,
    seed_lines,
)
from fedpfn.analysis.plots.run import plot_run, run_figure
from fedpfn.analysis.plots.style import (
    COLUMN_WIDTH,
    DPI,
    MIN_FONT_PT,
    OKABE_ITO,
    STYLE,
    accuracy_points,
    display_name,
    keep_inside,
    legend_below,
    new_figure,
    outside_canvas,
    save,
    setting_text,
    styled,
    wrapped,
)

__all__ = [
    "COLUMN_WIDTH",
    "DPI",
    "MIN_FONT_PT",
    "OKABE_ITO",
    "SEED_LINES_MAX",
    "STYLE",
    "ArmPoint",
    "PairedSeries",
    "accuracy_points",
    "against_figure",
    "bytes_figure",
    "comparison_figure",
    "cumulative_bytes",
    "display_name",
    "finish",
    "keep_inside",
    "key_texts",
    "legend_below",
    "line_key",
    "mean_over_seeds",
    "new_figure",
    "outside_canvas",
    "paired_figure",
    "plot_bytes",
    "plot_comparison",
    "plot_paired",
    "plot_run",
    "run_figure",
    "save",
    "seed_key",
    "seed_lines",
    "seed_matrix",
    "setting_text",
    "styled",
    "wrapped",
]
