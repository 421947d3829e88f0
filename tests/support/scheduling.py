"""What `make test`'s scheduler (tests/conftest.py's pytest_xdist_make_scheduler) knows of a test
before it runs: read from the test module's source, because the scheduler runs in xdist's
controller, which collects no test."""

from __future__ import annotations

import ast
import functools
import re
from collections.abc import Iterable
from pathlib import Path
from typing import TypeVar

ROOT = Path(__file__).resolve().parents[2]  # node ids' paths are relative to it (the rootdir)
MODULE_FIXTURE = re.compile(r"@pytest\.fixture\(\s*scope=[\"']module[\"']")
SLOW = re.compile(r"\bpytest\.mark\.slow\b")
Unit = TypeVar("Unit")


@functools.cache
def source(module: str) -> str:
    """A test module's text, by a node id's path ("" for none)."""
    try:
        return (ROOT / module).read_text()
    except OSError:
        return ""


def builds_a_module_fixture(module: str) -> bool:
    """Whether the test module at `module` defines a fixture of module scope (a SuperLink, a
    reference run, a copy of the checkout): such a module runs whole on one worker."""
    return bool(MODULE_FIXTURE.search(source(module)))


@functools.cache
def slow_tests(module: str) -> frozenset[str] | None:
    """The test functions of a module whose decorators mark them `slow` (`@pytest.mark.slow`, or
    one case's `pytest.param(..., marks=pytest.mark.slow)`, which marks the function here); None
    where `pytestmark` marks the whole module."""
    text = source(module)
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return frozenset()

    def says_slow(node: ast.AST) -> bool:
        return bool(SLOW.search(ast.get_source_segment(text, node) or ""))

    marking = [node for node in tree.body if isinstance(node, ast.Assign) and says_slow(node)]
    if any(getattr(target, "id", None) == "pytestmark" for node in marking for target in node.targets):
        return None
    functions = [node for node in ast.walk(tree) if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)]
    return frozenset(f.name for f in functions if any(map(says_slow, f.decorator_list)))


def is_slow(nodeid: str) -> bool:
    """Whether the test is marked `slow`, its function or its whole module: what its author says
    takes long. Read from the source, as the scheduler has no collected test to ask."""
    module, _, name = nodeid.partition("::")
    slow = slow_tests(module)
    return slow is None or name.split("::")[-1].split("[", 1)[0] in slow


def slow_first(units: Iterable[tuple[str, Unit]]) -> list[tuple[str, Unit]]:
    """xdist's work units (scope, its node ids), those holding a slow test first, each part in the
    order given (xdist's: the larger first): with two workers, the longest tests start early and
    the last ones to start are short, so neither worker idles long at the end."""
    return sorted(units, key=lambda unit: not any(map(is_slow, unit[1])))
