"""A study whose cells run in processes of their own (`fedpfn study run --jobs 2`), stopped by
SIGINT, SIGTERM or SIGKILL sent to it alone (as a script or a scheduler sends it, not Ctrl-C to
the whole terminal group): no cell is left running, the stop is one line with how to go on (exit
128 + the signal; a kill -9 says nothing), and each cell stopped where a run stops, so `status`
reads it as stopped."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.procfs import alive, children

STUDY = """title = "long cells"
runs = "runs/long"
seeds = [0]
shared = "--dataset fmnist --model mlp --num-clients 100 --clients-per-round 2 --rounds 400 --batch-size 64 --partition iid --eval-every 400"

[arms]
fedavg = "--algorithm fedavg"
fedpfn = "--algorithm fedpfn"
"""
CELLS = ("runs/long/fedavg/s0", "runs/long/fedpfn/s0")


@pytest.mark.slow  # three studies of two cells, each stopped once both cells have begun: about 35 s
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGKILL], ids=["int", "term", "kill"])
def test_no_cell_outlives_a_stopped_study(sig: signal.Signals, tmp_path: Path) -> None:
    (tmp_path / "long.toml").write_text(STUDY)
    fedpfn = str(Path(sys.executable).with_name("fedpfn"))
    env = {**os.environ, "FLWR_TELEMETRY_ENABLED": "0"}
    runner = subprocess.Popen([fedpfn, "study", "run", "long.toml", "--jobs", "2"], cwd=tmp_path, env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)  # fmt: skip
    deadline = time.monotonic() + 120
    begun = lambda: all((tmp_path / c / "metrics.jsonl").is_file() for c in CELLS)  # noqa: E731
    while not begun() and time.monotonic() < deadline:
        assert runner.poll() is None, runner.stderr.read()
        time.sleep(0.1)
    cells = [pid for pid in children(runner.pid) if "--cell" in Path(f"/proc/{pid}/cmdline").read_text()]
    assert len(cells) == 2, cells
    runner.send_signal(sig)
    _, err = runner.communicate(timeout=60)
    assert runner.returncode == (-sig if sig == signal.SIGKILL else 128 + sig), err
    if sig != signal.SIGKILL:  # killed, it says nothing: its watcher stops the cells (SIGTERM)
        assert "stopped: 2 running cells stopped with it; each goes on from where it stopped with: fedpfn study run long.toml" in err
    deadline = time.monotonic() + 10
    while any(alive(pid) for pid in cells) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(alive(pid) for pid in cells), f"left running after {sig.name}: {cells}"
    status = subprocess.run([fedpfn, "study", "status", "long.toml"], cwd=tmp_path, env=env, capture_output=True, text=True)
    lines = status.stdout.splitlines()
    assert all(" stopped at round " in line and "(run resumes it)" in line for line in lines[:2]), status.stdout
    assert lines[2].startswith("2 cells: 2 stopped;"), status.stdout
