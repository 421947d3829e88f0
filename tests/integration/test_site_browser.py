"""Every page of the built site in a real browser (issue 56): scripts/check_site.py opens each in
headless Chromium at 1,280 px and finds no table hiding a column or running past the content
column, and the pages it opens are all the site's. Skipped, with the reason, where Chromium or
mkdocs-material is not installed (`make docs` installs both)."""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def check_site():
    spec = importlib.util.spec_from_file_location("check_site", ROOT / "scripts" / "check_site.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def site_missing() -> str | None:
    """Why the check cannot run here, or None."""
    if (
        importlib.util.find_spec("material") is None
        or importlib.util.find_spec("mkdocstrings_handlers") is None
    ):
        return "needs mkdocs-material and mkdocstrings-python (pip install -e '.[docs]')"
    return None if shutil.which("chromium") else "needs chromium (make browser, or apt-get install chromium)"


@pytest.mark.slow  # a strict build, then every page in one of four Chromiums (about 1 s a page)
@pytest.mark.skipif(site_missing() is not None, reason=str(site_missing()))
def test_every_table_of_every_page_is_whole_at_1280_px(tmp_path: Path) -> None:
    module = check_site()
    site = tmp_path / "site"
    module.build(site)
    pages = module.site_pages(site)
    written = {str(p.relative_to(ROOT / "docs").with_suffix("")) for p in (ROOT / "docs").rglob("*.md")}
    # DIR/index.md is the site's DIR; every page of docs/ is opened, the drift study first
    written = {name if name == "index" else name.removesuffix("/index") for name in written}
    assert set(pages) == written and pages[0] == "results"
    shot = tmp_path / "results-1280.png"
    assert module.check(None, 1280, shot, site) == []
    from PIL import Image

    with Image.open(shot) as image:
        assert image.width == 1280 and image.height > 300


def test_a_page_the_site_lacks_is_named_not_measured(tmp_path: Path) -> None:
    """A misspelt --pages name is one line, before Chromium is started."""
    (tmp_path / "index.html").write_text("<html></html>")
    assert check_site().check(["resluts"], 1280, tmp_path / "shot.png", tmp_path) == [
        "no page resluts.md in the site"
    ]
