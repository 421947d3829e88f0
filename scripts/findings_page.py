#!/usr/bin/env python
"""The finding and the bottom line of docs/analysis/findings.md, and the finding at the top of
README.md and of the site's home page (docs/index.md), computed from the studies' stored results.

    python scripts/findings_page.py    # rewrites the parts between each page's markers

The finding is studies/findings/headline.py's (one sentence and its table), the bottom line
studies/findings/findings.py's; the rest of each page is prose that types in no number.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from fedpfn.analysis.paired_text import changed_section, verdicts_printed  # noqa: E402
from fedpfn.core.files import atomic_write_bytes  # noqa: E402
from studies.findings.findings import bottom_line  # noqa: E402
from studies.findings.headline import finding  # noqa: E402

PAGE = ROOT / "docs" / "analysis" / "findings.md"
README = ROOT / "README.md"
INDEX = ROOT / "docs" / "index.md"  # the site's home page mirrors the README
BEGIN = "<!-- bottom line: written by python scripts/findings_page.py from stored results -->"
END = "<!-- end of the bottom line -->"
FINDING = ("<!-- the finding: written by python scripts/findings_page.py from stored results -->",
           "<!-- end of the finding -->")  # fmt: skip


def between(page: str, markers: tuple[str, str], text: str) -> str:
    """`page` with `text` between its two markers (each on its own line)."""
    head, rest = page.split(markers[0], 1)
    _, tail = rest.split(markers[1], 1)
    return f"{head}{markers[0]}\n{text}\n{markers[1]}{tail}"


def finding_text() -> str:
    return "\n".join([*finding(ROOT), ""])


def written(page: str) -> str:
    """docs/analysis/findings.md with its finding and bottom line computed again."""
    with verdicts_printed() as seen:
        lines = "\n".join(f"{k}. {sentence}" for k, sentence in enumerate(bottom_line(ROOT), 1))
    changed = changed_section(seen).replace("\n## ", "\n### ")  # below the page's heading
    return between(between(page, FINDING, finding_text()), (BEGIN, END), f"\n{lines}\n{changed}")


def readme_written(page: str) -> str:
    """README.md (or docs/index.md) with its finding computed again."""
    return between(page, FINDING, finding_text())


def main() -> int:
    for path, markers, write in ((PAGE, (*FINDING, BEGIN, END), written), (README, FINDING, readme_written),
                                 (INDEX, FINDING, readme_written)):
        page = path.read_text()
        if not all(marker in page for marker in markers):
            print(f"error: {path.relative_to(ROOT)} lacks one of its markers {markers!r}", file=sys.stderr)
            return 2
        atomic_write_bytes(path, write(page).encode())
        print(f"wrote the computed parts of {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
