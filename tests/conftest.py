"""What every test runs under (one torch thread, Flower's telemetry and update checks off, a task
identity for Flower's messages) and the fixtures every folder shares. Helpers that are not
fixtures live in tests/support (docs/development/testing.md has the floor plan).
"""

from __future__ import annotations

import os

import pytest
import torch
from flwr.supercore.task_identity import TaskIdentity


# One thread per process: tests start Ray workers and subprocesses beside this one on
# small machines, and the same thread count everywhere keeps float sums identical.
os.environ["OMP_NUM_THREADS"] = "1"
torch.set_num_threads(1)
os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")
os.environ.setdefault("FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION", "1")
os.environ.setdefault("FLWR_DISABLE_UPDATE_CHECK", "1")

# Flower stamps messages with the running task's identity.
TaskIdentity.run_id, TaskIdentity.node_id, TaskIdentity.task_id = 1, 0, 1


@pytest.fixture(scope="module")
def one_torch_thread():
    """Tiny models run far faster on one thread, above all on a busy shared CPU; restored after
    (a module asks for it with `pytestmark = pytest.mark.usefixtures("one_torch_thread")`)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items) -> None:
    """Under `--dist loadgroup` (make test), a module whose tests share a module-scoped fixture (a
    SuperLink, a reference run, a Ray cluster, a copy of the checkout) runs on one worker, so that
    it starts once; every other test goes to whichever worker is free. Runs before xdist reads
    the marks (tryfirst); the groups are collected first."""
    for item in items:
        shared = [  # the suite's own (pytest's tmp_path_factory, say, is session-scoped as well)
            name for name, defs in item._fixtureinfo.name2fixturedefs.items()
            if defs[-1].scope in ("module", "session") and defs[-1].baseid and name != "one_torch_thread"
        ]  # fmt: skip
        if shared:
            item.add_marker(pytest.mark.xdist_group(item.module.__name__))
    # a group is one unit of work: started first, the single tests fill in around it rather than
    # a large group starting last and holding one worker after the other is done (stable: a
    # module's tests keep their order)
    items[:] = sorted(items, key=lambda item: item.get_closest_marker("xdist_group") is None)


def pytest_configure(config) -> None:
    """pytest-xdist (3.8 and older) groups a test by a suffix on its node id, which pytest 9.2
    no longer takes (pytest-xdist issue #1386): every group would be split over the workers
    without a word, each starting the module's SuperLink or reference run again. Refused."""
    from importlib.metadata import version

    from packaging.version import Version

    if config.getoption("dist", "no") != "loadgroup":  # without xdist there is no `dist` either
        return
    xdist = version("pytest-xdist")
    if Version(pytest.__version__) >= Version("9.2") and Version(xdist) < Version("3.9"):
        raise pytest.UsageError(
            f"--dist loadgroup needs pytest below 9.2 with pytest-xdist {xdist} "
            "(pytest-xdist issue #1386): pip install -e '.[test]' installs it"
        )


