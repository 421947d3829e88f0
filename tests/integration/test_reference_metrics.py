"""Numbers stay the same: the reference runs (scripts/reference_metrics.py) give the metrics stored in
tests/integration/reference_metrics.json, bit for bit. The comparison is made on the machine that stored them
(the same CPU kind, torch, numpy and threads); another machine rounds its sums differently and the
test says so and is skipped (the script records and checks on one machine). The suite runs four
of the MLP's client rules (FedAvg, FedPFN over SCAFFOLD, FedDyn, FedPNU), two on the batched
engine's processes mode (the default on the CPU, checked against the threads mode's stored rows)
and two on its vmap mode (the two arithmetics: Ray's, loop's and threads' numbers are processes');
`python scripts/reference_metrics.py OUT --check` runs every reference on every mode.
The instrument is shown to move: a stored figure changed is found, and named.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "reference_metrics.py"
STORED = ROOT / "tests" / "integration" / "reference_metrics.json"
SPLIT = {"processes": "fedavg,fedpfn+scaffold", "vmap": "feddyn,fedpnu"}  # plain, anchored, stateful rules
ENV = {**os.environ, "FLWR_TELEMETRY_ENABLED": "0", "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1"}


def check(out: Path, mode: str, stored: Path) -> subprocess.CompletedProcess:
    command = [sys.executable, str(SCRIPT), str(out), "--modes", mode, "--only", SPLIT[mode], "--check", str(stored)]
    return subprocess.run(command, env=ENV, capture_output=True, text=True, timeout=600)


@pytest.mark.slow  # four short MLP runs, about 40 s
def test_the_reference_runs_give_the_stored_metrics(tmp_path):
    for mode in SPLIT:
        done = check(tmp_path, mode, STORED)
        if done.returncode == 2 and "another machine's sums round differently" in done.stderr:
            pytest.skip(done.stderr.strip())  # before any run
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
        assert f"identical to {STORED}" in done.stdout
    # the instrument moves: a stored accuracy 5 points off, and a loss one unit in the last place off
    stored = json.loads(STORED.read_text())
    stored["modes"]["vmap"]["feddyn"][1]["test_accuracy"] += 0.05
    last = stored["modes"]["threads"]["fedpfn+scaffold"][2]  # the rows processes promises
    last["test_loss"] = math.nextafter(last["test_loss"], math.inf)
    changed = tmp_path / "changed.json"
    changed.write_text(json.dumps(stored))
    said = {mode: check(tmp_path, mode, changed) for mode in SPLIT}  # the runs are reused: nothing trains again
    assert [done.returncode for done in said.values()] == [1, 1]
    assert "vmap/feddyn: round 2 test_accuracy" in said["vmap"].stdout and "vmap/fedpnu" not in said["vmap"].stdout
    assert "processes/fedpfn+scaffold: round 3 test_loss" in said["processes"].stdout
    assert "processes/fedavg" not in said["processes"].stdout


def test_a_reference_the_script_does_not_know_is_refused_in_one_line(tmp_path):
    command = [sys.executable, str(SCRIPT), str(tmp_path / "out"), "--only", "fedavg,fedsgd"]
    done = subprocess.run(command, env=ENV, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "reference fedsgd unknown; one of " + ", ".join(
        ["fedavg", "fedprox", "scaffold", "feddyn", "fedpfn", "fedpnu", "fedpfn+scaffold", "moon",
         "cnn-fedpfn+fedprox", "resnet20-fedpnu+feddyn"]) in done.stderr  # fmt: skip
    assert not (tmp_path / "out").exists()
