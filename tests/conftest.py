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
