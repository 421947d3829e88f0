"""End to end: the run folder, faults, and every way to resume, on both engines.

One uninterrupted run on the batched engine is the reference (threads: each client trained
as Flower's ClientApp trains it, so Ray gives the same numbers). Every interrupted run below
(Ctrl-C and a dead simulation worker on Ray, each resumed on the batched engine; kill -9 before
any checkpoint; the batched engine killed and resumed on Ray; a finished run extended) must end
with the reference's numbers exactly: same rounds, no duplicates, bit-for-bit metrics. A resume
reads only the run folder, so Ray's folder resumed on the batched engine and the batched engine's
resumed on Ray cover Ray to Ray too, with one Ray start a test.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from fedpfn.runtime.transport import fails_this_round
from fedpfn.core.config import RunConfig
from fedpfn.core.hyper import flat_view
from fedpfn.core.protocol import to_numpy
from fedpfn.runtime.simulation import resume_config, simulate
from tests.support.config import tiny_config
from tests.support.site_commands import fedpfn_here

ROOT = Path(__file__).resolve().parents[2]
VOLATILE = {"seconds"}


def rows(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def stable(run_dir: Path) -> list[dict]:
    return [{k: v for k, v in r.items() if k not in VOLATILE} for r in rows(run_dir)]


def resumable_config(out: Path, engine: str = "batched", **overrides):
    """SCAFFOLD under FedPFN with FedAdam: client state, server state and anchors at once; 20
    clients of 3,000 images, 2 a round, so that a round takes a fraction of a second."""
    values = dict(algorithm="fedpfn+scaffold", server="fedadam", server_lr=0.003, rounds=4, num_clients=20,
                  out=str(out), engine=engine)  # fmt: skip
    if engine == "batched":
        values["engine_mode"] = "threads"
    values.update(overrides)
    return tiny_config(**values)


def flags(cfg) -> list[str]:
    """The settings that differ from the defaults (a flag the run would not use is refused, even at its default)."""
    defaults, values = flat_view(RunConfig().to_dict()), flat_view(cfg.to_dict())  # flags name settings alone
    return [f"--{k.replace('_', '-')}={v}" for k, v in values.items()
            if v is not None and not isinstance(v, bool) and (k not in defaults or v != defaults[k])]  # fmt: skip


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("ref") / "run"
    simulate(resumable_config(out), show_progress=False)
    return out


def start(cfg) -> subprocess.Popen:
    """run_sim.py in its own session, so its Ray processes can be found (and killed) together."""
    return subprocess.Popen([sys.executable, "run_sim.py", *flags(cfg)], cwd=ROOT, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def wait_for_round(proc: subprocess.Popen, metrics: Path, done: int, limit: float = 300) -> None:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if metrics.exists() and len(metrics.read_text().splitlines()) >= done:
            return
        assert proc.poll() is None, f"the run ended before round {done}: {proc.stderr.read()[-2000:]}"
        time.sleep(0.05)
    pytest.fail(f"round {done} did not finish in time")


def resume(out: Path, *extra: str) -> subprocess.CompletedProcess:
    """`fedpfn resume OUT EXTRA`, what a stopped run says to type, run in this process: the stopped
    run is the subprocess under test, its resume reads only the folder (about 5 s of Python, torch
    and Flower's start saved a resume)."""
    return fedpfn_here(shlex.join(["fedpfn", "resume", str(out), *extra]))


def test_run_folder_is_complete(reference):
    names = {p.name for p in reference.iterdir()}
    for expected in [
        "config.json", "metrics.jsonl", "clients.jsonl", "summary.json", "partition.json", "accuracy.png",
        "partition.png", "model_round_0.pt", "model_round_4.pt", "checkpoint.npz", "client_state", "run.log",
    ]:
        assert expected in names, expected
    assert not [n for n in names if n.endswith(".tmp") or n == ".fedpfn.lock"]
    config = json.loads((reference / "config.json").read_text())
    assert config["algorithm"] == "fedpfn+scaffold" and config["fedpfn.anchor_ratio"] == 0.4
    metrics = rows(reference)
    assert [r["round"] for r in metrics] == [1, 2, 3, 4]
    for r in metrics:
        assert 0 <= r["test_accuracy"] <= 1 and np.isfinite(r["test_loss"])
        assert r["num_clients"] == 2 and r["bytes_up"] > 0 and r["bytes_down"] > 0
        assert 0.39 < r["anchored_fraction"] < 0.41
    assert metrics[-1]["test_accuracy"] > metrics[0]["test_accuracy"]
    summary = json.loads((reference / "summary.json").read_text())
    assert summary["final_test_accuracy"] == metrics[-1]["test_accuracy"]
    assert summary["wall_seconds"] > 0 and summary["last5_window"] == "last 4 of 4 evaluated rounds"
    partition = json.loads((reference / "partition.json").read_text())
    assert sum(sum(c["label_counts"]) for c in partition["clients"]) == 60_000
    final = torch.load(reference / "model_round_4.pt", weights_only=True)
    assert set(final) == set(torch.load(reference / "model_round_0.pt", weights_only=True))


@pytest.mark.slow  # about 30 s idle: a run on Ray in a subprocess, stopped, resumed on the batched engine
def test_ctrl_c_stops_within_seconds_and_the_run_resumes_to_the_same_numbers(reference, tmp_path):
    out = tmp_path / "stopped"
    proc = start(resumable_config(out, engine="ray"))
    wait_for_round(proc, out / "metrics.jsonl", 1)
    asked = time.monotonic()
    os.kill(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 130 and time.monotonic() - asked < 10
    assert "Traceback" not in err
    stop_lines = [line for line in err.splitlines() if line.startswith("stopped after round ")]
    assert len(stop_lines) == 1 and f"; continue with: fedpfn resume {out}" in stop_lines[0], err
    assert not (out / ".fedpfn.lock").exists() and not (out / "summary.json").exists()
    from fedpfn.runtime.runfolder import read_tree

    checkpoint = out / "checkpoint.npz"  # the first process's time (none if stopped before writing it)
    before = read_tree(checkpoint)["elapsed_seconds"] if checkpoint.exists() else 0.0
    result = resume(out, "--engine", "batched", "--engine-mode", "threads")
    assert result.returncode == 0, result.stderr[-2000:]
    assert stable(out) == stable(reference)
    summary = json.loads((out / "summary.json").read_text())
    resumed_rounds = sum(r["seconds"] for r in rows(out) if r["round"] > 1)
    assert summary["wall_seconds"] > before + resumed_rounds  # both processes counted


@pytest.mark.slow  # about 18 s idle: a run in a subprocess, killed and resumed
def test_kill_9_before_the_first_checkpoint_resumes_from_round_1(reference, tmp_path):
    out = tmp_path / "killed"
    proc = start(resumable_config(out, checkpoint_every=0))
    wait_for_round(proc, out / "metrics.jsonl", 2)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert not (out / "checkpoint.npz").exists()
    result = resume(out)
    assert result.returncode == 0, result.stderr[-2000:]
    assert [r["round"] for r in rows(out)] == [1, 2, 3, 4]  # not 1, 2, 1, 2, 3, 4
    assert stable(out) == stable(reference)
    assert sum(r["bytes_up"] for r in rows(out)) == json.loads((out / "summary.json").read_text())["bytes_up_total"]


def ray_actors(session: int) -> list[int]:
    """The ClientApp actor processes of one session (a run started with start_new_session)."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        sid = int(stat.rsplit(")", 1)[1].split()[3])  # state, ppid, pgrp, session
        if sid == session and b"ClientAppActor" in cmdline:
            found.append(int(pid))
    return found


@pytest.mark.slow  # about 32 s idle: the resume starts Ray
def test_a_batched_run_killed_mid_run_resumes_on_ray_to_the_same_numbers(reference, tmp_path):
    """kill -9 of the batched engine, then `--resume --engine ray`: the reference's numbers, and
    the provenance says who ran what."""
    out = tmp_path / "batched"
    proc = start(resumable_config(out))
    wait_for_round(proc, out / "metrics.jsonl", 2)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    result = resume(out, "--engine", "ray")
    assert result.returncode == 0, result.stderr[-2000:]
    assert stable(out) == stable(reference)
    provenance = json.loads((out / "config.json").read_text())["provenance"]
    (resumed,) = provenance["resumes"]
    assert provenance["engine"] == "batched" and provenance["first_round"] == 1
    assert resumed["engine"] == "ray" and 2 <= resumed["first_round"] <= 4


@pytest.mark.slow  # about 36 s idle: a run on Ray, resumed on the batched engine
def test_a_dead_simulation_worker_stops_the_run_and_it_resumes_to_the_same_numbers(reference, tmp_path):
    out = tmp_path / "worker"
    proc = start(resumable_config(out, engine="ray"))
    wait_for_round(proc, out / "metrics.jsonl", 2)
    actors = ray_actors(proc.pid)
    assert actors, "no Ray actor found"
    os.kill(actors[0], signal.SIGKILL)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 1, err[-2000:]
    assert "simulation worker" in err and "died" in err and "Traceback" not in err
    assert "; continue with: fedpfn resume" in err
    done = [r["round"] for r in rows(out)]
    assert done and done == list(range(1, len(done) + 1)) and len(done) < 4
    result = resume(out, "--engine", "batched", "--engine-mode", "threads")
    assert result.returncode == 0, result.stderr[-2000:]
    assert stable(out) == stable(reference)


def test_a_finished_run_continues_to_more_rounds_with_the_numbers_of_a_longer_run(reference, tmp_path):
    out = tmp_path / "short"
    simulate(resumable_config(out, rounds=2), show_progress=False)
    assert [r["round"] for r in rows(out)] == [1, 2]
    cfg = resume_config(str(out), {"rounds": "4"})
    summary = simulate(cfg, resume=True, show_progress=False)
    assert stable(out) == stable(reference)
    assert summary["rounds"] == 4 and json.loads((out / "config.json").read_text())["rounds"] == 4


def test_failed_clients_are_counted_and_dropped_replies_leave_scaffolds_c_the_mean_of_c_i(tmp_path, capfd):
    """A failure under min_replies 4 skips its round, dropping replies whose clients did train.

    Failures: one log line each, counted per round and in the summary, the run completes.
    SCAFFOLD's server c = (1/N)·Σ c_i holds only if those clients drop the c_i they made
    then, as the server dropped their deltas: rounds 1 and 2 are skipped and every client
    trains in round 3, so c must be the mean of the four round-3 c_i.
    """
    from clients.scaffold import CLIENT_C
    from clients.state import ClientStateStore
    from fedpfn.runtime.runfolder import RunFolder

    out = tmp_path / "s"
    failures = dict(simulate_failures=0.2, min_replies=4, seed=8)
    cfg = tiny_config(algorithm="scaffold", clients_per_round=4, rounds=3, out=str(out), **failures)
    failing = [[p for p in range(4) if fails_this_round(cfg, r, p)] for r in (1, 2, 3)]
    assert failing == [[0], [1], []], "pick a seed that skips rounds 1 and 2 with survivors and takes round 3"
    summary = simulate(cfg, show_progress=False)
    metrics = rows(out)
    assert [r["num_failures"] for r in metrics] == [1, 1, 0] and summary["num_failures_total"] == 2
    assert [r["num_clients"] for r in metrics] == [3, 3, 4]
    assert [r["skipped"] for r in metrics] == [True, True, False]
    err = capfd.readouterr().err
    failure_lines = [line for line in err.splitlines() if "failed" in line and "(simulated)" in line]
    assert len(failure_lines) == 2 and "Traceback" not in err, err[-3000:]

    server_c = RunFolder(out).load_checkpoint(cfg.fingerprint())["strategy"]["parts"][0]["c"]
    client_c = [to_numpy(ClientStateStore(out, pid).load(CLIENT_C, up_to_round=3)) for pid in range(4)]
    for name, value in server_c.items():
        mean = np.mean([c[name].astype(np.float64) for c in client_c], axis=0)
        np.testing.assert_allclose(value, mean, rtol=1e-5, atol=1e-7, err_msg=name)
    assert max(np.abs(v).max() for v in server_c.values()) > 0, "round 3 moved c"


def test_a_run_folder_in_use_is_refused(tmp_path):
    from fedpfn.core.config import ConfigError
    from fedpfn.runtime.runfolder import RunFolder

    folder = RunFolder(tmp_path / "busy")
    with folder.exclusive():
        with pytest.raises(ConfigError, match="in use by another running process"):
            simulate(tiny_config(out=str(tmp_path / "busy")), show_progress=False)
    assert not (tmp_path / "busy" / "config.json").exists()
