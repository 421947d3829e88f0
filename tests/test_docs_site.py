"""The documentation site (issue 34): `mkdocs build --strict` of docs/ with mkdocs.yml's
navigation, so a broken link, a page missing from the navigation's files or a bad anchor hook
fails the suite. mkdocs-material comes with the `test` extra (`make test` installs it)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def mkdocs_missing() -> bool:
    try:
        import material  # noqa: F401  (mkdocs-material's package)
        import mkdocs  # noqa: F401
    except ImportError:
        return True
    return False


def build(config: Path, site: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(config), "-d", str(site)], check=False,
        capture_output=True, text=True, timeout=120, env={"NO_MKDOCS_2_WARNING": "1", "PATH": "/usr/bin:/bin"},
    )  # fmt: skip


@pytest.mark.skipif(mkdocs_missing(), reason="mkdocs-material is not installed: pip install -e '.[docs]'")
def test_the_site_builds_strictly_with_every_page(tmp_path):
    done = build(ROOT / "mkdocs.yml", tmp_path / "site")
    assert done.returncode == 0, done.stderr[-3000:]
    for page in ("getting-started/install", "guide/engines", "alignment", "results", "development/extending"):
        assert (tmp_path / "site" / page / "index.html").is_file(), page


@pytest.mark.skipif(mkdocs_missing(), reason="mkdocs-material is not installed: pip install -e '.[docs]'")
def test_a_broken_link_fails_the_strict_build(tmp_path):
    """The check can fail: a copy of docs/ with one link to a page that does not exist."""
    copy = tmp_path / "repo"
    shutil.copytree(ROOT / "docs", copy / "docs")
    (copy / "scripts").mkdir()
    shutil.copy2(ROOT / "scripts" / "mkdocs_hooks.py", copy / "scripts" / "mkdocs_hooks.py")
    shutil.copy2(ROOT / "mkdocs.yml", copy / "mkdocs.yml")
    (copy / "docs" / "index.md").write_text("# fedpfn\n\n[gone](guide/no-such-page.md)\n")
    done = build(copy / "mkdocs.yml", tmp_path / "site")
    assert done.returncode != 0 and "no-such-page.md" in done.stderr, done.stderr[-3000:]
