"""The front door (issue 56): the README opens with the finding and a list of what fedpfn can do,
each capability linking the page that documents it (the heading too, where it names one), within
150 lines; the site's home page (docs/index.md) carries the same finding and the same list."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
INDEX = (ROOT / "docs" / "index.md").read_text()
FINDING = re.compile(r"<!-- the finding: .*?<!-- end of the finding -->", re.DOTALL)
LINK = re.compile(r"\]\(([^)#\s]+)(?:#([^)\s]+))?\)")
NEW_FEATURES = (
    "guide/privacy.md",
    "guide/attacks.md",
    "guide/tracking.md",
    "guide/data.md",
    "guide/studies.md",
)


def capabilities(page: str) -> list[str]:
    """The bullets of the page's 'What it can do' section."""
    section = page.split("## What it can do", 1)[1].split("\n## ", 1)[0]
    return [line for line in section.splitlines() if line.startswith("- ")]


def slug(heading: str) -> str:
    """A heading's anchor as mkdocs' toc writes it (Python-Markdown's slugify)."""
    plain = re.sub(r"[^\w\s-]", "", heading.encode("ascii", "ignore").decode()).strip().lower()
    return re.sub(r"[-\s]+", "-", plain)


def anchors(page: Path) -> set[str]:
    return {slug(line.lstrip("#").strip()) for line in page.read_text().splitlines() if line.startswith("#")}


def test_the_readme_opens_with_the_finding_then_what_it_can_do_within_150_lines() -> None:
    assert len(README.splitlines()) <= 150
    finding, can, start = (
        README.index(mark) for mark in ("<!-- the finding:", "## What it can do", "## Two commands")
    )
    assert finding < can < start
    assert README.count("\n## ", 0, finding) == 1  # only the finding's heading before it


def test_every_capability_links_its_page_and_heading_and_the_new_features_are_listed() -> None:
    linked = []
    for line in capabilities(README):
        found = LINK.findall(line)
        assert found, f"a capability without a link: {line}"
        for path, anchor in found:
            target = ROOT / path
            assert target.is_file(), f"{line}: {path} is no file"
            assert not anchor or anchor in anchors(target), f"{line}: {path} has no heading #{anchor}"
            linked.append(path.removeprefix("docs/"))
    assert set(NEW_FEATURES) <= set(linked)
    assert len(capabilities(README)) >= 12


def test_the_home_page_mirrors_the_readme() -> None:
    """The same finding, computed into both by scripts/findings_page.py, and the same list, its links
    read from docs/."""
    assert FINDING.search(INDEX)[0] == FINDING.search(README)[0]
    assert capabilities(INDEX) == [line.replace("](docs/", "](") for line in capabilities(README)]
