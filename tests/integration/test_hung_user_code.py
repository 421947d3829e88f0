"""A user's server wrapper, server strategy, client mod or client rule that raises or never returns
mid-run (issue 58, item 5): one line naming it, never a traceback, and, for what runs around a
round (a wrapper, a server strategy, a mod), never a process that waits forever: the round's
timeout bounds it on every engine it runs on.

A wrapper, and a server strategy of the user's (`--server package.module:Class`), run in the
server's process whatever the engine (here the default, the batched engine): what it raises, or
a hook that has not returned within `--round-timeout`, stops the run with one `error:` line naming
it, exit 2, the folder as a stop leaves it (resumable from its last checkpoint, no round
half-recorded). A client rule's error on the batched engine stops the run the same way. A mod
runs inside the ClientApp (Ray, `flwr run`, a deployment; the batched engine refuses one): the
server closes the round at its deadline as for any silent client, and the ClientApp call itself
ends at the bound, so Ray's worker is free and the simulation ends with its last round instead of
waiting for the call."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import run_sim
from fedpfn.core.files import CONFIG, LOCK, METRICS, SUMMARY, read_jsonl

ROOT = Path(__file__).resolve().parents[2]
TINY = ["--model", "mlp", "--num-clients", "2", "--clients-per-round", "2", "--rounds", "2", "--partition", "iid"]

PARTS = '''
import threading
import time
from flwr.serverapp.strategy import FedAvg, Strategy

from clients.base import ClientRule


class Passing(Strategy):
    def __init__(self, strategy):
        self.strategy = strategy

    def configure_train(self, server_round, arrays, config, grid):
        return self.strategy.configure_train(server_round, arrays, config, grid)

    def aggregate_train(self, server_round, replies):
        return self.strategy.aggregate_train(server_round, replies)

    def configure_evaluate(self, server_round, arrays, config, grid):
        return []

    def aggregate_evaluate(self, server_round, replies):
        return None

    def summary(self):
        pass


class Raises(Passing):
    def aggregate_train(self, server_round, replies):
        raise ValueError("shapes do not match")


class Interrupts(Passing):
    def configure_train(self, server_round, arrays, config, grid):
        raise KeyboardInterrupt


class Hangs(Passing):
    def aggregate_train(self, server_round, replies):
        while True:
            time.sleep(1)


def hangs(msg, context, call_next):
    while True:
        time.sleep(1)


class Refuses(FedAvg):
    """A user's server strategy that raises in its aggregation."""

    def aggregate_train(self, server_round, replies):
        raise ValueError("no replies I like")


class Breaks(ClientRule):
    """A user's client rule whose loss raises, as a bug in it would."""

    name = "breaks"

    def criterion(self, logits, targets, per_client):
        raise ValueError("my loss is broken")


class Exits(ClientRule):
    """A user's client rule that calls sys.exit, as a script's habit would."""

    name = "exits"

    def criterion(self, logits, targets, per_client):
        raise SystemExit("no more")


released = threading.Event()  # set by the test, so that the abandoned call ends with it


class Waits(FedAvg):
    """A user's server strategy whose aggregation waits for what never comes."""

    def aggregate_train(self, server_round, replies):
        released.wait()
'''


def stopped_before_round_one(out: Path) -> None:
    """The folder as a stop in round 1 leaves it: the run's settings, no round recorded, no lock."""
    assert (out / CONFIG).exists()
    assert (out / METRICS).read_text() == ""
    assert not (out / LOCK).exists()


@pytest.fixture
def parts(tmp_path: Path, monkeypatch) -> Path:
    (tmp_path / "h58_hung.py").write_text(PARTS)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_a_wrapper_that_raises_mid_run_is_one_line_naming_it(parts: Path, capsys) -> None:
    out = parts / "run"
    code = run_sim.main([*TINY, "--server-wrap", "h58_hung:Raises", "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err, err
    assert err.strip().splitlines()[-1] == (
        "error: server_wrap: h58_hung:Raises's aggregate_train in round 1 raised ValueError: shapes do not match"
    )
    stopped_before_round_one(out)


def test_a_wrapper_that_interrupts_mid_run_stops_as_a_ctrl_c_does(parts: Path, capsys) -> None:
    out = parts / "run"
    code = run_sim.main([*TINY, "--server-wrap", "h58_hung:Interrupts", "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 130 and "Traceback" not in err, err
    assert err.strip().splitlines()[-1] == (
        "error: server_wrap: h58_hung:Interrupts's configure_train in round 1 raised KeyboardInterrupt"
    )
    stopped_before_round_one(out)


def test_a_server_strategy_that_raises_mid_run_is_one_line_naming_it(parts: Path, capsys) -> None:
    out = parts / "run"
    assert run_sim.main([*TINY, "--server", "h58_hung:Refuses", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err, err
    assert err.strip().splitlines()[-1] == (
        "error: server: h58_hung:Refuses's aggregate_train in round 1 raised ValueError: no replies I like"
    )
    stopped_before_round_one(out)


def test_a_server_strategy_that_never_returns_stops_the_run_at_the_round_timeout(parts: Path, capsys) -> None:
    out = parts / "run"
    try:
        code = run_sim.main([*TINY, "--server", "h58_hung:Waits", "--round-timeout", "2", "--out", str(out)])
    finally:
        sys.modules["h58_hung"].released.set()
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err, err
    assert err.strip().splitlines()[-1] == (
        "error: server: h58_hung:Waits's aggregate_train in round 1 did not return within 2 s (round_timeout)"
    )
    stopped_before_round_one(out)


@pytest.mark.parametrize("mode", ["processes", "loop"])
def test_a_client_rule_that_raises_mid_run_is_one_line_naming_it(mode: str, parts: Path, capsys) -> None:
    """On the batched engine (the default) the rule runs in its worker processes or in this one;
    a rule's error reached the command as a traceback, exit 1."""
    out = parts / "run"
    assert run_sim.main([*TINY, "--algorithm", "h58_hung:Breaks", "--engine-mode", mode, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err, err
    assert err.strip().splitlines()[-1] == (
        "error: round 1: the clients' training, which runs h58_hung:Breaks, raised ValueError: my loss is broken"
    )
    stopped_before_round_one(out)


def test_a_client_rule_that_exits_in_a_worker_process_is_one_line_naming_it(parts: Path, capsys) -> None:
    """SystemExit in a worker reached the driver as 'a worker process ... ended (exit code 0)'."""
    out = parts / "run"
    assert run_sim.main([*TINY, "--algorithm", "h58_hung:Exits", "--engine-mode", "processes", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and "worker process" not in err, err
    assert err.strip().splitlines()[-1].startswith(
        "error: round 1: the clients' training, which runs h58_hung:Exits, raised SystemExit"
    ), err
    stopped_before_round_one(out)


def run_sim_process(folder: Path, *args: str, timeout: float) -> subprocess.CompletedProcess:
    """`python run_sim.py ARGS` in `folder` (where the user's module lies), as a user runs it."""
    command = [sys.executable, str(ROOT / "run_sim.py"), *args]
    return subprocess.run(command, cwd=folder, capture_output=True, text=True, timeout=timeout)


def test_a_wrapper_that_never_returns_stops_the_run_at_the_round_timeout(parts: Path) -> None:
    """Before the bound, the process waited forever in round 1 (subprocess.TimeoutExpired here)."""
    out = parts / "run"
    done = run_sim_process(parts, *TINY, "--server-wrap", "h58_hung:Hangs", "--round-timeout", "3",
                           "--out", str(out), timeout=300)  # fmt: skip
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.strip().splitlines()[-1] == (
        "error: server_wrap: h58_hung:Hangs's aggregate_train in round 1 did not return within 3 s (round_timeout)"
    )
    stopped_before_round_one(out)


@pytest.mark.slow
def test_a_client_mod_that_never_returns_lets_the_ray_simulation_end(parts: Path) -> None:
    """Each round closes at its deadline with the silent clients as failures; the run then ends.
    Before the bound, Flower's simulation waited for its Ray workers' calls after the last round:
    the process never exited (subprocess.TimeoutExpired here)."""
    out = parts / "run"
    done = run_sim_process(parts, *TINY, "--rounds", "1", "--engine", "ray", "--client-mod", "h58_hung:hangs",
                           "--round-timeout", "5", "--out", str(out), timeout=400)  # fmt: skip
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    rows = read_jsonl(out / METRICS)
    assert [(row["num_clients"], row["num_failures"], row["skipped"]) for row in rows] == [(0, 2, True)]
    assert (out / SUMMARY).exists()
