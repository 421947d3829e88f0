"""The documentation site (issue 34): `mkdocs build --strict` of docs/ with mkdocs.yml's
navigation, so a broken link, a page missing from the navigation's files or a bad anchor hook
fails the suite. mkdocs-material comes with the `test` extra (`make test` installs it).

Every command on every page of the navigation runs as written in a fresh copy of the checkout
(tests/site_commands.py); each one that cannot run here is checked as far as it can be and
listed as skipped with its reason."""

from __future__ import annotations

import shlex
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from site_commands import (
    as_a_newcomer,
    check,
    check_not_run,
    fresh_checkout,
    page_commands,
    program_words,
    why_not_run,
)

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


# --- every command on every page a newcomer follows ------------------------------------------------


def site_pages() -> list[Path]:
    """Every page of the navigation, in its order: the guides, the deployment and architecture
    pages and the pages scripts write."""
    import yaml

    def leaves(nav) -> list[str]:
        if isinstance(nav, str):
            return [nav]
        items = nav.values() if isinstance(nav, dict) else nav
        return [leaf for item in items for leaf in leaves(item)]

    return [ROOT / "docs" / page for page in leaves(yaml.safe_load((ROOT / "mkdocs.yml").read_text())["nav"])]


def commands_not_run() -> list:
    """(page, command, why) for every command of the README and the site that cannot run here."""
    found = []
    for page in [ROOT / "README.md", *site_pages()]:
        name = str(page.relative_to(ROOT))
        for command in page_commands(page):
            for part in command.split("&&"):
                if (not_run := why_not_run(program_words(part))) is not None:
                    shown = shlex.join(shlex.split(part, comments=True))
                    found.append(pytest.param(name, shown, not_run, id=f"{name}: {shown[:50]}"))
    return found


@pytest.mark.slow  # about a minute on the loaded 2 cores: the scripts' pages and helps are subprocesses
def test_every_site_command_runs_as_written(tmp_path_factory, monkeypatch):
    """The site's pages, in the navigation's order, in a clone of their own (the README's runs
    would hold their folders): as a newcomer reading the site types them."""
    copy = fresh_checkout(tmp_path_factory)
    as_a_newcomer(copy, monkeypatch)
    commands = [(page, command) for page in site_pages() for command in page_commands(page)]
    by_page = Counter(page.name for page, _ in commands)
    assert len(commands) >= 90 and by_page["deployment.md"] >= 40, by_page  # nothing silently dropped
    assert all(by_page[name] for name in ("alignment.md", "alignment_federated.md", "lmc.md", "fusion.md")), (
        by_page
    )
    for page, command in commands:
        try:
            check(copy, command, monkeypatch)
        except (Exception, pytest.fail.Exception) as err:
            raise AssertionError(
                f"{page.relative_to(ROOT)}: `{command}` did not run as written: {err}"
            ) from err


@pytest.fixture(scope="module")
def checkout(tmp_path_factory) -> Path:
    return fresh_checkout(tmp_path_factory)


@pytest.mark.slow  # about 2 s each idle (40 s at load 14): most start a program for its --help
@pytest.mark.parametrize(("page", "command", "not_run"), commands_not_run())
def test_a_command_that_cannot_run_here_is_checked_and_listed(page, command, not_run, checkout, monkeypatch):
    """What can be checked of it is, then it is listed as skipped with the reason."""
    as_a_newcomer(checkout, monkeypatch)
    check_not_run(checkout, program_words(command), not_run)
    checked = {"help": "; its flags checked against its --help", "settings": "; its settings checked",
               "run config": "; its run config checked as Flower fuses it"}.get(not_run.checked, "")  # fmt: skip
    pytest.skip(f"not run here: {page}: `{command}`: {not_run.why}{checked}")
