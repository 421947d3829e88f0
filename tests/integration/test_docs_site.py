"""The documentation site (issue 34): `mkdocs build --strict` of docs/ with mkdocs.yml's
navigation, so a broken link, a page missing from the navigation's files or a bad anchor hook
fails the suite. mkdocs-material and mkdocstrings-python (the API reference, docs/reference/)
come with the `test` extra (`make test` installs them).

Every command on every page of the navigation runs as written in a fresh copy of the checkout
(tests/support/site_commands.py); each one that cannot run here is checked as far as it can be and
listed as skipped with its reason."""

from __future__ import annotations

import shlex
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from tests.support.site_commands import (
    as_a_newcomer,
    check,
    check_not_run,
    fresh_checkout,
    page_commands,
    program_words,
)
from tests.support.not_run import why_not_run

ROOT = Path(__file__).resolve().parents[2]


def mkdocs_missing() -> bool:
    try:
        import material  # noqa: F401  (mkdocs-material's package)
        import mkdocs  # noqa: F401
        import mkdocstrings_handlers.python  # noqa: F401  (the API reference's renderer)
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
    for page in ("getting-started/install", "guide/engines", "alignment", "results", "development/extending",
                 "getting-started/tutorial", "reference/client-rules"):  # fmt: skip
        assert (tmp_path / "site" / page / "index.html").is_file(), page
    shown = (tmp_path / "site" / "reference" / "client-rules" / "index.html").read_text()
    assert not [hook for hook in rule_hooks() if f'id="clients.base.ClientRule.{hook}"' not in shown], (
        "a hook without a docstring is left out of the API reference"
    )


def rule_hooks() -> list[str]:
    """ClientRule's public methods, from its source (mkdocstrings shows those with a docstring)."""
    import ast

    tree = ast.parse((ROOT / "clients" / "base.py").read_text())
    rule = next(node for node in tree.body if isinstance(node, ast.ClassDef) and node.name == "ClientRule")
    hooks = [node.name for node in rule.body if isinstance(node, ast.FunctionDef) and not node.name.startswith("_")]
    assert {"loss_term", "correct", "after_step", "outputs"} <= set(hooks), hooks
    return hooks


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


@pytest.mark.slow  # about 25 s at load 5: 136 commands, the scripts and the helps subprocesses
def test_every_site_command_runs_as_written(tmp_path_factory, monkeypatch):
    """The site's pages, in the navigation's order, in a clone of their own (the README's runs
    would hold their folders): as a newcomer reading the site types them."""
    copy = fresh_checkout(tmp_path_factory)
    as_a_newcomer(copy, monkeypatch)
    commands = [(page, command) for page in site_pages() for command in page_commands(page)]
    by_page = Counter(page.name for page, _ in commands)
    assert len(commands) >= 90 and by_page["deployment.md"] >= 38 and by_page["benchmarks.md"] >= 4, by_page  # none dropped
    assert all(by_page[name] for name in ("alignment.md", "alignment_federated.md", "lmc.md", "fusion.md")), (
        by_page
    )
    checked: set[str] = set()  # a command two pages print (the gate's page: its page and findings') runs once
    for page, command in commands:
        if (typed := shlex.join(shlex.split(command, comments=True))) in checked:
            continue
        checked.add(typed)
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


# --- the site in a real browser (issue 44): whole tables, the verdict column on screen -------------


def check_site():
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import check_site as module
    finally:
        sys.path.remove(str(ROOT / "scripts"))
    return module


def test_the_browser_check_reports_a_clipped_table():
    """The check can fail: a table wider than its frame, or past the content column, is one line."""
    measured = {"tables": [
        {"index": 0, "columns": 10, "head": ["arm", "verdict"], "hidden": 112, "right": 900, "column_right": 980},
        {"index": 1, "columns": 4, "head": ["a", "final round"], "hidden": 0, "right": 1100, "column_right": 980},
        {"index": 2, "columns": 3, "head": ["a", "b"], "hidden": 0, "right": 700, "column_right": 980},
    ]}  # fmt: skip
    assert check_site().problems("results", measured) == [
        "results.md table 1 (10 columns, last 'verdict'): 112 px are hidden behind its scroll bar",
        "results.md table 2 (4 columns, last 'final round'): its last column ends 120 px past the content column",
    ]


def test_code_references_link_to_the_repository():
    """A file name in code on a page links to it at repo_url (mkdocs.yml); names of no file, code
    blocks and existing links stay as they are."""
    import yaml

    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        from mkdocs_hooks import link_code_references
    finally:
        sys.path.remove(str(ROOT / "scripts"))
    repo = yaml.safe_load((ROOT / "mkdocs.yml").read_text())["repo_url"]
    page = "`clients/fedlc.py` and `strategies/`, not `no/such.py` nor `--rounds`\n```\n`clients/base.py`\n```\n[`run_sim.py`](x)"
    assert link_code_references(page, repo).splitlines() == [
        f"[`clients/fedlc.py`]({repo}/blob/main/clients/fedlc.py) and [`strategies/`]({repo}/tree/main/strategies), "
        "not `no/such.py` nor `--rounds`",
        "```", "`clients/base.py`", "```", "[`run_sim.py`](x)",
    ]


def test_the_extending_pages_own_rule_trains_by_dotted_path(tmp_path, monkeypatch):
    """The out-of-tree rule of docs/development/extending.md, saved in a folder of the reader's own,
    trains a round of the quickstart, its setting a flag and recorded (issue 44)."""
    import json

    import run_sim
    from tests.support.site_commands import extending_page_rule

    code = extending_page_rule()
    assert len([line for line in code.splitlines() if line.strip()]) <= 16, code  # "in 15 lines"
    (tmp_path / "my_rule.py").write_text(code)
    monkeypatch.chdir(tmp_path)
    args = ["--config", str(ROOT / "configs" / "quickstart.toml"), "--algorithm", "my_rule:LabelSmoothing",
            "--smoothing", "0.2", "--rounds", "1", "--out", str(tmp_path / "run")]  # fmt: skip
    assert run_sim.main(args) == 0
    saved = json.loads((tmp_path / "run" / "config.json").read_text())
    assert saved["algorithm"] == "my_rule:LabelSmoothing" and saved["label_smoothing.smoothing"] == 0.2
    assert (tmp_path / "run" / "summary.json").is_file()


def test_compare_and_resume_are_spelt_as_verbs_and_the_run_flags_named_once():
    """Pages mixed `fedpfn compare` with `run --compare`: the verbs everywhere, the flags (kept for
    scripts) on the refused-inputs page alone."""
    import re

    flags = re.compile(r"(fedpfn run|run_sim\.py) --(compare|resume)\b")
    naming = [str(page.relative_to(ROOT)) for page in [ROOT / "README.md", *site_pages()] if flags.search(page.read_text())]
    assert naming == ["docs/guide/refused-inputs.md"], naming


def test_deployment_leads_with_the_multi_machine_recipe():
    """The recipe began at line 291 of 573, after start-up profiles; the page said every client is a
    Ray actor (the default engine starts no Ray) and listed checkpoint.pt (runs write checkpoint.npz)."""
    text = (ROOT / "docs" / "deployment.md").read_text()
    first = text.index("\n## ")
    assert text[first:].startswith("\n## 1. Several machines"), text[first : first + 80]
    assert text.index("| step | where | what | section |") < min(text.index("```", first), text.index("\n### ", first))
    assert text.index("| step | where |") < 2000 and "Ray actor in one process tree" not in text
    for page in [ROOT / "README.md", *site_pages()]:
        assert "checkpoint.pt`" not in page.read_text(), page


def test_long_names_in_table_rows_may_wrap_and_links_code_and_blocks_stay_whole():
    """anchor_masks=client in a header widened results.md's bytes tables past the column."""
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        from mkdocs_hooks import break_long_names
    finally:
        sys.path.remove(str(ROOT / "scripts"))
    page = "| arm / fedpfn anchor_masks=client | [a_b](x_y.md?q=1) `c_d` |\nnot_a_row\n```\n| a_b |\n```"
    assert break_long_names(page).splitlines() == [
        "| arm / fedpfn anchor_<wbr>masks=<wbr>client | [a_<wbr>b](x_y.md?q=1) `c_d` |", "not_a_row", "```", "| a_b |", "```",
    ]
