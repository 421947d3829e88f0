"""No verdict on any page disagrees with the 95 % interval printed beside it (issue 55: 'Krum − FedAvg
+65.0 [+43.1, +86.9] points reads "not resolved"'). Every committed page is scanned, its tables and
its sentences: "higher" needs an interval above 0, "lower" one below 0, a plain "not resolved" one
that holds 0, and "not resolved after Holm" one that excludes 0 (its family's correction did not).
That each page is what its stored results write is held by the pages' own tests
(tests/studies/test_study_pages.py, tests/studies/test_findings_page.py, ...)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]
NUMBER = r"[+-]?\d+(?:\.\d+)?(?:e[+-]?\d+)?"
VERDICT = r"(higher|lower|not resolved after Holm|not resolved|the interval excludes 0, but)"
PROSE = (
    re.compile(rf"\[({NUMBER}), ({NUMBER})\][^\[\]|]{{0,60}}?[:;] {VERDICT}"),  # '[-0.29, +9.25]: not resolved'
    re.compile(rf"95 % CI ({NUMBER}) to ({NUMBER}); [^|]*? seeds\); {VERDICT}"),  # the earlier study's lines
)
INTERVAL_CELL = re.compile(rf"^\[({NUMBER}), ({NUMBER})\]$")
GENERATED = ("docs/guide/attacks-results.md", "docs/alignment_main.md",
             "docs/alignment_confirm.md", "docs/alignment_confirm_a01.md", "docs/results_earlier.md", "docs/fusion.md",
             "docs/results.md", "docs/alignment_federated.md", "docs/alignment.md", "docs/analysis/findings.md")  # fmt: skip


def verdicts(text: str) -> list[tuple[float, float, str, str]]:
    """Every (low, high, verdict, line) the page prints: table rows with an interval cell and a verdict
    cell, and sentences that put a verdict after an interval."""
    found = []
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")] if line.startswith("|") else []
        interval = next((m for m in map(INTERVAL_CELL.match, cells) if m), None)
        said = re.match(VERDICT, cells[-1]) if cells else None
        if interval and said:
            found.append((float(interval[1]), float(interval[2]), said[1], line))
            continue
        found += [(float(m[1]), float(m[2]), m[3], line) for pattern in PROSE for m in pattern.finditer(line)]
    return found


def disagrees(low: float, high: float, said: str) -> bool:
    """Whether a verdict contradicts its printed interval (printed rounding may put an end at 0)."""
    if said == "higher":
        return not (low >= 0 < high)
    if said == "lower":
        return not (high <= 0 > low)
    if said == "not resolved":
        return not (low <= 0 <= high)
    return low < 0 < high  # after Holm: the interval excludes 0 and the family's correction does not


def pages() -> list[Path]:
    return sorted([*ROOT.glob("docs/**/*.md"), ROOT / "README.md"])


@pytest.mark.parametrize("path", pages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_verdict_contradicts_its_interval(path: Path) -> None:
    wrong = [line for low, high, said, line in verdicts(path.read_text()) if disagrees(low, high, said)]
    assert not wrong, f"{len(wrong)} verdicts contradict their intervals, first: {wrong[0][:300]}"


@pytest.mark.parametrize("page", GENERATED)
def test_every_generated_page_has_its_verdicts_read(page: str) -> None:
    """The scan reads each results page's verdicts (a page it could not parse would pass unread)."""
    assert verdicts((ROOT / page).read_text())


@pytest.mark.parametrize(("line", "wrong"), [
    ("| Krum − FedAvg | +65.020 | [+43.096, +86.944] | 0.0061 | 1.0000 | 3 of 3 | not resolved; the CI ... |", True),
    ("| Krum − FedAvg | +65.020 | [+43.096, +86.944] | 0.0061 | 0.0499 | 3 of 3 | higher |", False),
    ("| x | -1.0 | [-2.0, +0.5] | 0.2 | 0.4 | 1 of 3 | lower |", True),
    ("| x | +5.0 | [+1.05, +8.98] | 0.03 | 0.29 | 3 of 3 | not resolved after Holm (the interval excludes 0) |", False),
    ("| x | +5.0 | [-1.05, +8.98] | 0.3 | 0.6 | 3 of 3 | not resolved after Holm (the interval excludes 0) |", True),
    ("- shared − plain: +4.48 pp [-0.29, +9.25]: not resolved; the 95 % CI excludes gains above", False),
    ("+0.16 points at α=0.5 (95 % CI [+0.08, +0.24]; not resolved: the interval excludes", True),
    ("  - fedpfn: ... against fedavg: +3.00 points (95 % CI +2.40 to +3.60; p 0.0625, p Holm 0.25; higher on 5 of 5 "
     "seeds); not resolved.", True),
])  # fmt: skip
def test_a_planted_contradiction_is_caught(line: str, wrong: bool) -> None:
    found = verdicts(line)
    assert len(found) == 1 and disagrees(*found[0][:3]) == wrong
