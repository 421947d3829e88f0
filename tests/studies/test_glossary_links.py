"""Every results page links the glossary near its top, and the glossary defines the words those
pages use, each once (issue 56: the matchers, REPAIR, nats, Holm and TNA-PFN were missing, and
"cell" meant two things)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
GLOSSARY = (ROOT / "docs" / "glossary.md").read_text()
WRITTEN = sorted({page["out"] for toml in ROOT.glob("studies/**/*.toml")
                  if (page := tomllib.loads(toml.read_text()).get("page")) and (ROOT / page.get("out", "-")).is_file()
                  and page["out"].startswith("docs/")})  # fmt: skip
RESULTS = [*WRITTEN, "docs/analysis/findings.md", "docs/lmc.md"]
TERMS = ("TNA-PFN", "REPAIR", "Holm", "matcher", "full", "masked", "changes", "activation", "barrier", "P", "R", "cell",
         "verdict", "resolved", "share of the whole", "endpoint", "family", "regime", "units moved", "fusion gap")  # fmt: skip


@pytest.mark.parametrize("page", RESULTS)
def test_the_page_links_the_glossary_before_its_first_section(page: str) -> None:
    top = (ROOT / page).read_text().split("\n## ", 1)[0]
    links = re.findall(r"\]\(([^)]*glossary\.md)\)", top)
    assert links and (ROOT / page).parent.joinpath(links[0]).resolve() == ROOT / "docs" / "glossary.md"


def test_the_glossary_defines_each_word_once() -> None:
    """Each word in bold in a row's first column (the row's terms) or its meaning (the row's kinds:
    the four matchers, Holm's adjusted p), and no word heads two rows."""
    rows = [line for line in GLOSSARY.splitlines() if line.startswith("| **")]
    heads = re.findall(r"\*\*([^*]+)\*\*", "\n".join(row.split(" | ")[0] for row in rows))
    assert set(TERMS) <= set(re.findall(r"\*\*([^*]+)\*\*", "\n".join(rows))), TERMS
    assert len(heads) == len(set(heads)), [t for t in heads if heads.count(t) > 1]
    assert "nats" in GLOSSARY.split("\n## ", 1)[0]  # the unit, said once at the top
    assert len(WRITTEN) >= 12  # every study page of the site, found from the study files
