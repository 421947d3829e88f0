"""Text from a run folder, made inert before it goes into a Markdown page.

A report's labels, settings and title come from the `config.json` of runs that anyone may have
written; copied raw into report.md, `<img src=x onerror=...>`, `[a link](...)`, a `|` that
splits a table cell or a newline that starts a heading would be rendered as such. `inline`
escapes what Markdown or HTML would act on and keeps the rest as typed (`anchor_ratio=0.4`
stays readable); `code` makes a code span no backtick can close early; `image` a figure's line
whose alt text is `inline`'s; `table` every page's Markdown table. `inert` is a report
with every such text escaped, for the Markdown tables only: CSV and JSON keep the values.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Sequence
from typing import Any

from fedpfn.analysis.runs import display_value
from fedpfn.analysis.stats import Report

_ENTITIES = {"&": "&amp;", "<": "&lt;", ">": "&gt;"}
_ACTIVE = re.compile(r"[\\`*\[\]|~!#]|(?<![A-Za-z0-9])_|_(?![A-Za-z0-9])")  # emphasis, links, cells, code
_BREAKS = re.compile(r"[\x00-\x1f\x7f]+")  # a newline would start a block: a heading, a list, a table


def inline(value: Any) -> str:
    """`value` as text that Markdown and HTML show as typed, on one line."""
    text = _BREAKS.sub(" ", str(value))
    text = "".join(_ENTITIES.get(char, char) for char in text)
    return _ACTIVE.sub(lambda found: "\\" + found.group(0), text)


def code(value: Any) -> str:
    """`value` as a one-line code span: fenced by more backticks than it holds in a row."""
    text = _BREAKS.sub(" ", str(value))
    fence = "`" * (max((len(run) for run in re.findall("`+", text)), default=0) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def image(alt: Any, link: str) -> str:
    """A Markdown image whose alt text (a title made of a file's words) is shown as typed."""
    return f"![{inline(alt)}]({link})"


def table_row(cells: Sequence[Any]) -> str:
    """One line of a Markdown table, its cells as given (a file's text goes through `inline` first)."""
    return "| " + " | ".join(map(str, cells)) + " |"


def table(head: Sequence[str], rows: Iterable[Sequence[Any]] = ()) -> list[str]:
    """A Markdown table's lines: the header, the rule under it and a line per row; every page's tables
    are written by this one function, so their columns and rule always agree."""
    return [table_row(head), "|---" * len(head) + "|", *map(table_row, rows)]


def inert(report: Report) -> Report:
    """A copy of `report` whose texts from run folders are escaped (`inline`) for Markdown."""
    arms = [dataclasses.replace(arm, label=inline(arm.label)) for arm in report.arms]
    paired = [dataclasses.replace(p, label=inline(p.label)) for p in report.paired]
    at_bytes = [dataclasses.replace(a, label=inline(a.label)) for a in report.at_bytes]
    differences = {
        inline(key): {inline(label): inline(display_value(value)) for label, value in values.items()}
        for key, values in report.differences.items()
    }
    return dataclasses.replace(
        report, title=inline(report.title), baseline=inline(report.baseline), arms=arms, paired=paired,
        at_bytes=at_bytes, differences=differences,
    )  # fmt: skip
