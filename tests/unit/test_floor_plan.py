"""The tests' floor plan (docs/development/testing.md), read off the test files: every test module
in the folder of what it needs, none importing another, and tests/unit starting nothing.

Every import counts, at the top of a file or inside a test (lazy).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
FOLDERS = ("unit", "integration", "deploy", "studies")
# what starts a process, Ray or Flower's runtime: none of it in tests/unit
STARTERS = ("subprocess", "multiprocessing", "concurrent.futures", "ray", "flwr.simulation",
            "tests.support.flower_link", "tests.support.site_commands")  # fmt: skip
RUNS = {("fedpfn.runtime.simulation", "simulate"), ("flwr.simulation", "run_simulation")}
ALONE = re.compile(r"^(@pytest\.mark\.alone|pytestmark\s*=.*pytest\.mark\.alone)\b", re.MULTILINE)


def imported(path: Path) -> list[tuple[str, str | None]]:
    """(module, name) for every import in the file: name None for `import module`."""
    found: list[tuple[str, str | None]] = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found += [(alias.name, None) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            found += [(node.module or "", alias.name) for alias in node.names]
    return found


def strays(root: Path) -> list[str]:
    """Test modules outside the four folders."""
    return [p.relative_to(root).as_posix() for p in sorted(root.rglob("test_*.py")) if p.parent.name not in FOLDERS]


def cross_imports(root: Path) -> list[str]:
    """Imports of a test module or of the conftest, anywhere under `root`."""
    offenders = []
    for path in sorted(root.rglob("*.py")):
        for module, name in imported(path):
            parts = module.split(".")
            if parts[-1].startswith("test_") or "conftest" in parts or (name or "").startswith("test_"):
                offenders.append(f"{path.relative_to(root).as_posix()}: {module} {name or ''}".strip())
    return offenders


def unit_starters(root: Path) -> list[str]:
    """What a module of `root`/unit imports that starts a process, Ray or Flower's runtime."""
    offenders = []
    for path in sorted((root / "unit").glob("*.py")):
        for module, name in imported(path):
            full = f"{module}.{name}" if name else module
            if any(full == s or full.startswith(s + ".") for s in STARTERS) or (module, name) in RUNS:
                offenders.append(f"{path.name}: {full}")
    return offenders


def test_every_test_module_is_in_the_folder_of_what_it_needs():
    assert strays(TESTS) == [], f"tests/{{{','.join(FOLDERS)}}} are the folders"


def test_no_test_module_imports_another_or_the_conftest():
    """What tests share lives in tests/support; a test module is never imported as a library."""
    assert cross_imports(TESTS) == []


def test_the_unit_folder_starts_no_process_ray_or_flower_runtime():
    """tests/unit runs in this process only (make test-fast, under 2 minutes on 2 cores)."""
    assert unit_starters(TESTS) == []


def alone_outside_deploy(root: Path) -> list[str]:
    """Test files outside `root`/deploy that mark a test `alone`: make test's second command
    collects tests/deploy only, so such a test would run in neither of its commands."""
    return [p.relative_to(root).as_posix() for p in sorted(root.rglob("test_*.py"))
            if p.parent.name != "deploy" and ALONE.search(p.read_text())]  # fmt: skip


def test_the_tests_that_run_alone_are_in_the_deploy_folder_make_test_collects_for_them():
    assert alone_outside_deploy(TESTS) == [] and alone_outside_deploy(TESTS.parent / "benchmarks") == []
    assert "-m alone tests/deploy\n" in (TESTS.parent / "Makefile").read_text()


def test_each_check_finds_a_planted_offender(tmp_path):
    (tmp_path / "unit").mkdir()
    (tmp_path / "test_stray.py").write_text("")
    (tmp_path / "unit" / "test_planted.py").write_text(
        "import subprocess\n\ndef test_x():\n    from test_other import helper\n"
        "    from fedpfn.runtime.simulation import simulate\n"
    )
    assert strays(tmp_path) == ["test_stray.py"]
    (tmp_path / "test_stray.py").write_text("@pytest.mark.alone\ndef test_x(): ...\n")
    assert alone_outside_deploy(tmp_path) == ["test_stray.py"]
    assert cross_imports(tmp_path) == ["unit/test_planted.py: test_other helper"]
    assert unit_starters(tmp_path) == ["test_planted.py: subprocess", "test_planted.py: fedpfn.runtime.simulation.simulate"]
