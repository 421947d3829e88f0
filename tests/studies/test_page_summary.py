"""A study page in short (issue 56): `<!-- study: summary [FAMILY ...] -->` puts each named family's
differences at the page's top, a line each with its 95 % interval and verdict, the same numbers and
verdicts as the family tables below; those tables say a verdict in a few words a cell, and what the
words mean once beside each table. An unknown family in the marker is refused in one line."""

from __future__ import annotations

import re
import shutil
import tomllib
from pathlib import Path

from fedpfn.analysis.paired_text import VERDICT_KEY
from fedpfn.cli.main import main as fedpfn

ROOT = Path(__file__).resolve().parents[2]
LINE = re.compile(r"^    - (.+): ([+-]\d+\.\d\d) \S+ \[([+-]\d+\.\d\d), ([+-]\d+\.\d\d)\]: (.+)$")


def confirm_copy(tmp_path: Path) -> tuple[str, Path]:
    """The confirmatory study, its template and stored results under tmp_path; its path and page."""
    study = next(ROOT.glob("studies/**/alignment_confirm.toml")).relative_to(ROOT)
    page = tomllib.loads((ROOT / study).read_text())["page"]
    for path in (str(study), page["template"], page["stored"]):
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / path, tmp_path / path)
    return str(study), tmp_path / page["template"]


def rows(page: str) -> list[tuple[str, str, str, str, str]]:
    """Each family table's row: the comparison, its mean and interval as the summary rounds them,
    and its verdict cell's first words."""
    found = []
    for line in page.splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if len(cells) == 7 and cells[2].startswith("["):
            low, high = map(float, cells[2].strip("[]").split(", "))
            found.append(
                (cells[0], f"{float(cells[1]):+.2f}", f"{low:+.2f}", f"{high:+.2f}", cells[6].split(";")[0])
            )
            assert len(cells[6].split()) <= 12, cells[6]  # a few words, not 35
    return found


def test_the_summary_says_what_the_tables_below_say(tmp_path: Path, monkeypatch, capsys) -> None:
    study, template = confirm_copy(tmp_path)
    text = template.read_text()
    assert "<!-- study: summary " in text.split("## Pre-registration", 1)[0]  # the page's top
    monkeypatch.chdir(tmp_path)
    assert fedpfn(["study", "page", "--stored", study]) == 0
    page = next((tmp_path / "docs").glob("alignment_confirm.md")).read_text()
    top = page.split("## Pre-registration", 1)[0]
    said = [LINE.match(line) for line in top.splitlines() if line.startswith("    - ")]
    assert said and all(said), top
    table = rows(page)
    assert all(m.groups() in table for m in said), (said, table)
    assert page.count(VERDICT_KEY) == text.count("<!-- study: family ")  # once beside each family's table


def test_an_unknown_family_in_the_summary_is_refused_in_one_line(tmp_path: Path, monkeypatch, capsys) -> None:
    study, template = confirm_copy(tmp_path)
    template.write_text("# t\n\n<!-- study: summary step nosuch -->\n")
    monkeypatch.chdir(tmp_path)
    assert fedpfn(["study", "page", "--stored", study]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "unknown marker '<!-- study: summary step nosuch -->'" in err
