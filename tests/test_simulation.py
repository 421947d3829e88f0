"""End to end on Flower's Ray simulation engine: run folder, determinism, faults, resume."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from conftest import tiny_config
from fedpfn.app import fails_this_round
from fedpfn.simulation import simulate

ROOT = Path(__file__).resolve().parents[1]
VOLATILE = {"seconds"}


def rows(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def stable(run_dir: Path) -> list[dict]:
    return [{k: v for k, v in r.items() if k not in VOLATILE} for r in rows(run_dir)]


def resumable_config(out: Path, **overrides):
    """SCAFFOLD under FedPFN with FedAdam: client state, server state and anchors at once."""
    values = dict(
        algorithm="fedpfn+scaffold",
        server="fedadam",
        server_lr=0.003,  # FedAdam's default 0.1 overshoots on a 4-client MLP
        rounds=4,
        checkpoint_every=1,
        out=str(out),
    )
    values.update(overrides)
    return tiny_config(**values)


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("ref") / "run"
    simulate(resumable_config(out), show_progress=False)
    return out


def test_run_folder_is_complete(reference):
    names = {p.name for p in reference.iterdir()}
    for expected in [
        "config.json", "metrics.jsonl", "summary.json", "partition.json", "accuracy.png",
        "partition.png", "model_round_0.pt", "model_round_4.pt", "checkpoint.pt",
    ]:
        assert expected in names, expected
    config = json.loads((reference / "config.json").read_text())
    assert config["algorithm"] == "fedpfn+scaffold" and config["anchor_ratio"] == 0.4
    metrics = rows(reference)
    assert [r["round"] for r in metrics] == [1, 2, 3, 4]
    for r in metrics:
        assert 0 <= r["test_accuracy"] <= 1 and np.isfinite(r["test_loss"])
        assert r["num_clients"] == 2 and r["bytes_up"] > 0 and r["bytes_down"] > 0
    assert metrics[-1]["test_accuracy"] > metrics[0]["test_accuracy"]
    summary = json.loads((reference / "summary.json").read_text())
    assert summary["final_test_accuracy"] == metrics[-1]["test_accuracy"]
    assert summary["wall_seconds"] > 0
    partition = json.loads((reference / "partition.json").read_text())
    assert len(partition["clients"]) == 4
    assert sum(sum(c["label_counts"]) for c in partition["clients"]) == 60_000
    final = torch.load(reference / "model_round_4.pt")
    assert set(final) == set(torch.load(reference / "model_round_0.pt"))


def test_same_seed_same_metrics(reference, tmp_path):
    again = tmp_path / "again"
    simulate(resumable_config(again), show_progress=False)
    assert stable(again) == stable(reference)


def _kill_after_round(cmd: list[str], metrics: Path, after_round: int) -> None:
    proc = subprocess.Popen(cmd, cwd=ROOT, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 240
    try:
        while time.monotonic() < deadline:
            if metrics.exists() and len(metrics.read_text().splitlines()) >= after_round:
                break
            assert proc.poll() is None, "the run ended before it could be killed"
            time.sleep(0.05)
        else:
            pytest.fail("no round finished in time")
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the driver and the Ray processes it started
        proc.wait()


def test_resume_after_kill_9_matches_uninterrupted_run(reference, tmp_path):
    out = tmp_path / "killed"
    cfg = resumable_config(out)
    flags = [f"--{k.replace('_', '-')}={v}" for k, v in cfg.to_dict().items() if v is not None and not isinstance(v, bool)]
    _kill_after_round([sys.executable, "run_sim.py", *flags], out / "metrics.jsonl", after_round=2)
    assert not (out / "summary.json").exists()
    result = subprocess.run([sys.executable, "run_sim.py", "--resume", str(out)], cwd=ROOT,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert stable(out) == stable(reference)  # no duplicated or missing rounds, same numbers
    again = subprocess.run([sys.executable, "run_sim.py", "--resume", str(out)], cwd=ROOT,
                           capture_output=True, text=True, timeout=120)
    assert again.returncode == 2 and "is finished" in again.stderr
    taken = subprocess.run([sys.executable, "run_sim.py", *flags], cwd=ROOT,
                           capture_output=True, text=True, timeout=120)
    assert taken.returncode == 2 and "already holds a run" in taken.stderr


def test_failing_clients_are_counted_and_the_run_completes(tmp_path):
    cfg = tiny_config(clients_per_round=4, rounds=3, simulate_failures=0.3, out=str(tmp_path / "f"))
    summary = simulate(cfg, show_progress=False)
    expected = [sum(fails_this_round(cfg, r, p) for p in range(4)) for r in (1, 2, 3)]
    assert sum(expected) > 0, "pick a seed whose draw fails somebody"
    metrics = rows(tmp_path / "f")
    assert [r["num_failures"] for r in metrics] == expected
    assert [r["num_clients"] for r in metrics] == [4 - e for e in expected]
    assert summary["num_failures_total"] == sum(expected)


def test_a_run_folder_in_use_is_refused(tmp_path):
    from fedpfn.config import ConfigError
    from fedpfn.results import RunFolder

    folder = RunFolder(tmp_path / "busy")
    with folder.exclusive():
        with pytest.raises(ConfigError, match="in use by another running process"):
            simulate(tiny_config(out=str(tmp_path / "busy")), show_progress=False)
    assert not (tmp_path / "busy" / "config.json").exists()
