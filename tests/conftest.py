"""Shared test helpers: small configs and one federated round driven in-process.

The in-process round uses the real strategies, clients and Flower messages; only the
transport (Ray or gRPC) is left out. The Ray and deployment paths have their own tests.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile

import pytest
import torch
from flwr.app import ArrayRecord, Message, RecordDict
from flwr.supercore.task_identity import TaskIdentity

from fedpfn.core.config import RunConfig
from fedpfn.core.user_code import code_settings, name_code
from fedpfn.runtime.algorithms import load_config

# One thread per process: tests start Ray workers and subprocesses beside this one on
# small machines, and the same thread count everywhere keeps float sums identical.
os.environ["OMP_NUM_THREADS"] = "1"
torch.set_num_threads(1)
os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")
os.environ.setdefault("FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION", "1")
os.environ.setdefault("FLWR_DISABLE_UPDATE_CHECK", "1")

# Runs that tests start without an `out` write here, not into the checkout.
_SCRATCH = tempfile.mkdtemp(prefix="fedpfn-tests-")
atexit.register(shutil.rmtree, _SCRATCH, ignore_errors=True)

# Flower stamps messages with the running task's identity.
TaskIdentity.run_id, TaskIdentity.node_id, TaskIdentity.task_id = 1, 0, 1


def no_engine_starts(monkeypatch, engine_run) -> None:
    """Every engine's `run` replaced by `engine_run`: what a test sees when a run would start."""
    import dataclasses

    from fedpfn.runtime.engines.registry import ENGINES

    for name, engine in ENGINES.items():
        monkeypatch.setitem(ENGINES, name, dataclasses.replace(engine, run=engine_run))


def tiny_config(**overrides) -> RunConfig:
    """Fashion-MNIST, the MLP, 4 clients: small enough to train in a second."""
    values = dict(
        dataset="fmnist",
        model="mlp",
        num_clients=4,
        clients_per_round=2,
        rounds=2,
        batch_size=64,
        lr=0.05,
        partition="iid",
        seed=0,
        out=tempfile.mkdtemp(dir=_SCRATCH),
    )
    values.update(overrides)
    name_code(*code_settings(values))  # the settings a test gives, as if typed
    return load_config(values)


class NodeGrid:
    """Stands in for a grid only as far as a strategy asks it for node ids."""

    def __init__(self, node_ids: list[int]) -> None:
        self.node_ids = node_ids

    def get_node_ids(self) -> list[int]:
        return list(self.node_ids)


def client_replies(cfg: RunConfig, strategy, arrays: ArrayRecord, server_round: int, states=None) -> list[Message]:
    """configure_train, then each sampled client's fit, with real messages (node id == partition id).

    `states` keeps each client's context.state across calls. Replies come sorted by partition.
    """
    from fedpfn.runtime.algorithms import client_rules
    from fedpfn.runtime.engines.program import local_round
    from fedpfn.runtime.server import train_config, with_accepted_round
    from strategies import sample_clients

    states = {} if states is None else states
    chosen = sample_clients(cfg.seed, server_round, cfg.federation.num_clients, cfg.federation.clients_per_round)
    messages = strategy.configure_train(server_round, arrays, train_config(cfg, server_round), NodeGrid(chosen))
    replies = []
    for message in messages:
        pid = message.metadata.dst_node_id
        content = with_accepted_round(message, server_round - 1).content  # every earlier reply was taken
        state = states.setdefault(pid, RecordDict())
        content = local_round(client_rules(cfg), cfg, pid, state, torch.device("cpu"), content)
        replies.append(Message(content=content, reply_to=message))
    return sorted(replies, key=lambda r: int(r.content.metric_records["metrics"]["partition-id"]))


def first_fast(cases: list[tuple]) -> list:
    """A costly model family's cases (ResNet-20's) as pytest params: the first stays in `make
    test-fast`, so the quick suite still trains that family once; `make test` runs them all."""
    return [pytest.param(*case, marks=() if i == 0 else pytest.mark.slow) for i, case in enumerate(cases)]


def run_round(cfg: RunConfig, strategy, arrays: ArrayRecord, server_round: int, states=None):
    """One whole round in-process: `client_replies`, then aggregate_train.

    Returns (new arrays, train metrics, replies as the inner strategy saw them, bytes
    uploaded as sent).
    """
    from fedpfn.core.protocol import arrays_bytes

    replies = client_replies(cfg, strategy, arrays, server_round, states)
    bytes_up = sum(arrays_bytes(r.content) for r in replies)
    new_arrays, metrics = strategy.aggregate_train(server_round, replies)
    return new_arrays, metrics, replies, bytes_up


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


def run_main(main, argv: list[str], capsys) -> tuple[int, str]:
    """An analysis command's `main` called in-process: its exit code (argparse's own refusals
    included) and what it wrote to stderr."""
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse's own refusals
        code = exc.code
    return code, capsys.readouterr().err
