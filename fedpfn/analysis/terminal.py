"""A comparison as the terminal shows it: one compact table, then where the whole report is.

The report files (`comparison.md` or `report.md`, .csv, .json, the figures) hold every table in
full; a terminal gets the headline alone, arms by rows: the primary accuracy (the mean of the
last k evaluated rounds) and the final round's, each mean ± std over seeds, and each arm's
paired difference from the baseline on the primary accuracy with its 95 % interval and the
verdict's first words. Drawn by rich, so it fits the terminal's width (cells wrap, never clip).
"""

from __future__ import annotations

import shlex
from pathlib import Path

from rich.console import Console
from rich.table import Table
from rich.text import Text

from fedpfn.analysis.render import _pct, _points, report_names, verdict
from fedpfn.analysis.stats import PRIMARY, Paired, Report


def difference_cell(p: Paired | None) -> str:
    """'+1.23 [-0.50, +2.96]' in points; the baseline's own row and a 1-seed comparison say so."""
    if p is None:
        return "baseline"
    if p.low is None or p.high is None:
        return f"{_points(p.mean)} (no interval)"
    return f"{_points(p.mean)} [{_points(p.low)}, {_points(p.high)}]"


def short_verdict(p: Paired | None) -> str:
    """'higher', 'lower', 'not resolved' or 'no test: 1 seed': the report's verdict without its reasons."""
    return "" if p is None else verdict(p).split(";")[0]


def headline_table(report: Report) -> Table:
    """Arms × the headline figures, with intervals (the report's Markdown has the rest)."""
    table = Table(title=report.title, title_justify="left", show_edge=False, pad_edge=False)
    for head, justify in (("arm", "left"), ("seeds", "right"), (f"{report.window}, %", "right"),
                          ("final round, %", "right"), (f"− {report.baseline}, points [95 % CI]", "right"),
                          ("verdict", "left")):  # fmt: skip
        table.add_column(head, justify=justify, overflow="fold")  # a narrow terminal wraps, never clips
    primary = {p.label: p for p in report.paired if p.metric == PRIMARY}
    for row in (arm.row() for arm in report.arms):
        p = primary.get(row["arm"])
        cells = (row["arm"], str(row["seeds"]), _pct(row["lastk_acc_mean"], row["lastk_acc_std"]),
                 _pct(row["final_acc_mean"], row["final_acc_std"]), difference_cell(p), short_verdict(p))  # fmt: skip
        table.add_row(*map(Text, cells))  # plain text: an arm's name or a bracket is never markup
    table.caption = f"mean ± std over seeds (n-1); {report.baseline} is the baseline, compared seed by seed"
    return table


def show(report: Report, markdown_file: Path, console: Console | None = None) -> None:
    """The headline table, then one `next:` line: the report file that holds every table in full."""
    console = console or Console(highlight=False)
    console.print(headline_table(report))
    figures = [name for name in report_names(report, markdown_file.stem) if name.endswith(".png")]
    console.print(
        f"  next: every table and verdict in full: {shlex.quote(str(markdown_file))}"
        f" (the figures beside it: {', '.join(figures)})",
        soft_wrap=True, markup=False,
    )  # fmt: skip
