#!/usr/bin/env python
"""The bottom line at the top of docs/analysis/findings.md, computed from the studies' stored results.

    python scripts/findings_page.py    # rewrites the part between the page's two markers

The sentences are fedpfn/study/findings.py's; the rest of the page is prose that types in no number.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from fedpfn.core.files import atomic_write_bytes  # noqa: E402
from fedpfn.analysis.paired_text import changed_section, verdicts_printed  # noqa: E402
from fedpfn.study.findings import bottom_line  # noqa: E402

PAGE = ROOT / "docs" / "analysis" / "findings.md"
BEGIN = "<!-- bottom line: written by python scripts/findings_page.py from stored results -->"
END = "<!-- end of the bottom line -->"


def written(page: str) -> str:
    """`page` with its bottom line computed again."""
    head, rest = page.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    with verdicts_printed() as seen:
        lines = "\n".join(f"{k}. {sentence}" for k, sentence in enumerate(bottom_line(ROOT), 1))
    changed = changed_section(seen).replace("\n## ", "\n### ")  # below the page's own heading
    return f"{head}{BEGIN}\n\n{lines}\n{changed}\n{END}{tail}"


def main() -> int:
    page = PAGE.read_text()
    if BEGIN not in page or END not in page:
        print(f"error: {PAGE.relative_to(ROOT)} lacks its markers {BEGIN!r} and {END!r}", file=sys.stderr)
        return 2
    atomic_write_bytes(PAGE, written(page).encode())
    print(f"wrote the bottom line of {PAGE.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
