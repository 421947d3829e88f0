"""What every test runs under (one torch thread, Flower's telemetry and update checks off, a task
identity for Flower's messages) and the fixtures every folder shares. Helpers that are not
fixtures live in tests/support (docs/development/testing.md has the floor plan).
"""

from __future__ import annotations

import os

import pytest
import torch
from flwr.supercore.task_identity import TaskIdentity

from tests.support.scheduling import builds_a_module_fixture, slow_first


# One thread per process: tests start Ray workers and subprocesses beside this one on
# small machines, and the same thread count everywhere keeps float sums identical.
os.environ["OMP_NUM_THREADS"] = "1"
torch.set_num_threads(1)
os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")
os.environ.setdefault("FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION", "1")
os.environ.setdefault("FLWR_DISABLE_UPDATE_CHECK", "1")

# Flower stamps messages with the running task's identity.
TaskIdentity.run_id, TaskIdentity.node_id, TaskIdentity.task_id = 1, 0, 1


@pytest.hookimpl(optionalhook=True)  # a hook of pytest-xdist's: unknown where it is not loaded (-p no:xdist)
def pytest_xdist_make_scheduler(config, log):  # noqa: ANN001, ANN201
    """`make test`'s `--dist loadfile`, balanced: a module that builds a module-scoped fixture runs
    whole on one worker, so it builds it once; every other test goes on its own to whichever worker
    is free. The units holding a slow test start first (then the larger before the smaller, as
    xdist orders them), so no long one starts last while the other worker idles. What loadgroup's
    marks did, without the node-id suffix pytest 9.2 no longer takes (pytest-xdist issue #1386),
    so no pytest pin."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class ModulesWithFixturesWhole(LoadScopeScheduling):
        ordered = False

        def _split_scope(self, nodeid: str) -> str:
            module = nodeid.split("::", 1)[0]
            return module if builds_a_module_fixture(module) else nodeid

        def _assign_work_unit(self, node) -> None:  # noqa: ANN001
            if not self.ordered:  # the first assignment: xdist has queued every unit, by size
                units = slow_first(self.workqueue.items())
                self.workqueue.clear()
                self.workqueue.update(units)
                self.ordered = True
            super()._assign_work_unit(node)

    return ModulesWithFixturesWhole(config, log)


@pytest.fixture(autouse=True)
def registries_as_they_were():
    """A user's rule or attack named by dotted path is registered under its path in the process that
    ran it (as a command's would be): not for the next test, whichever worker runs it."""
    from clients import CLIENT_RULES
    from clients.attacks.base import ATTACKS

    before = {id(registry): dict(registry) for registry in (CLIENT_RULES, ATTACKS)}
    yield
    for registry in (CLIENT_RULES, ATTACKS):
        registry.clear()
        registry.update(before[id(registry)])


@pytest.fixture(scope="module")
def one_torch_thread():
    """Tiny models run far faster on one thread, above all on a busy shared CPU; restored after
    (a module asks for it with `pytestmark = pytest.mark.usefixtures("one_torch_thread")`)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
