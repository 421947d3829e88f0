"""One table renderer for every page (issue 57 item 2): fedpfn.analysis.markup.table writes every
Markdown table the project's code writes, so no other module builds a table's rule by hand, and
every table on a generated page has as many cells in each row as in its header and its rule."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from fedpfn.analysis.markup import table

ROOT = Path(__file__).parents[2]
CELL_EDGE = re.compile(r"(?<!\\)\|")  # a cell's `|` escaped by fedpfn.analysis.markup.inline is not an edge
PAGES = sorted({*ROOT.glob("docs/*.md"), *ROOT.glob("docs/guide/*-results.md"), *ROOT.glob("docs/analysis/*.md"),
                ROOT / "README.md"})  # fmt: skip


def test_only_markup_writes_a_tables_rule() -> None:
    code = [p for folder in ("fedpfn", "studies", "scripts") for p in (ROOT / folder).rglob("*.py")]
    by_hand = [str(p.relative_to(ROOT)) for p in code if "|---" in p.read_text() and p.name != "markup.py"]
    assert not by_hand, f"a table's rule written by hand (use fedpfn.analysis.markup.table): {by_hand}"


def test_a_table_has_its_headers_columns_in_every_row() -> None:
    lines = table(["a", "b", "c"], [[1, "x", ""], ["y", 2.5, "z"]])
    assert lines == ["| a | b | c |", "|---|---|---|", "| 1 | x |  |", "| y | 2.5 | z |"]
    assert widths("\n".join(lines)) == [(3, 3, 3, 3)]
    assert widths("| a | b |\n|---|---|\n| 1 |\n\n| c \\| d |\n|---|\n") == [(2, 2, 1), (1, 1)]  # ragged; an escaped |


def widths(page: str) -> list[tuple[int, ...]]:
    """Each table's cell count per line (header, rule, rows), a table being a run of lines starting with '|'."""
    found, current = [], []
    for line in [*page.splitlines(), ""]:
        if line.startswith("|"):
            current.append(len(CELL_EDGE.findall(line)) - 1)
        elif current:
            found.append(tuple(current))
            current = []
    return found


@pytest.mark.parametrize("path", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_table_on_a_page_has_as_many_cells_in_each_row_as_in_its_header(path: Path) -> None:
    ragged = [w for w in widths(path.read_text()) if len(set(w)) > 1]
    assert not ragged, f"{len(ragged)} tables whose rows differ from their header, first: {ragged[0]}"
