"""What `make test`'s scheduler (tests/conftest.py's pytest_xdist_make_scheduler) knows of a test
before it runs: read from the test module's source, because the scheduler runs in xdist's
controller, which collects no test."""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable
from pathlib import Path
from typing import TypeVar

ROOT = Path(__file__).resolve().parents[2]  # node ids' paths are relative to it (the rootdir)
MODULE_FIXTURE = re.compile(r"@pytest\.fixture\(\s*scope=[\"']module[\"']")
# `@pytest.mark.slow`, maybe other decorators (or a decorator's continued lines), then the function
SLOW = re.compile(r"^@pytest\.mark\.slow\b.*\n(?:[@\s].*\n)*?(?:async )?def (\w+)", re.MULTILINE)
SLOW_MODULE = re.compile(r"^pytestmark\s*=.*pytest\.mark\.slow\b", re.MULTILINE)
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


def is_slow(nodeid: str) -> bool:
    """Whether the test is marked `slow`, its function or its whole module: what its author says
    takes long. A mark given inside pytest.param (one case of several) is not seen."""
    module, _, name = nodeid.partition("::")
    text = source(module)
    return bool(SLOW_MODULE.search(text)) or name.split("[", 1)[0] in SLOW.findall(text)


def slow_first(units: Iterable[tuple[str, Unit]]) -> list[tuple[str, Unit]]:
    """xdist's work units (scope, its node ids), those holding a slow test first, each part in the
    order given (xdist's: the larger first): with two workers, the longest tests start early and
    the last ones to start are short, so neither worker idles long at the end."""
    return sorted(units, key=lambda unit: not any(map(is_slow, unit[1])))
