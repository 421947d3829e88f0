"""`flwr run` with an empty wrapper or mod in its run config (issue 58): refused with the line
`run_sim.py --server-wrap ''` gives, as the run's status, before the run folder is made.

pyproject declares `server-wrap = ""` as "not given", so only what the user's `--run-config`
names as '' is refused: an empty shell variable must not switch privacy off without a word."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.support.flower_link import BIN, simulation_superlink

ROOT = Path(__file__).resolve().parents[2]
SAYS = "server_wrap: '' names no wrapper; give package.module:Name (docs/guide/privacy.md), or leave --server-wrap out"


@pytest.mark.slow
def test_an_empty_server_wrap_under_flwr_run_is_the_runs_status_and_no_folder(tmp_path: Path) -> None:
    config = "num-clients=2 clients-per-round=2 rounds=1 model='mlp' partition='iid' out='empty-wrap' server-wrap=''"
    with simulation_superlink(tmp_path / "flwr") as link:
        run = [str(BIN / "flwr"), "run", ".", "--run-config", config, "--federation-config",
               "num-supernodes=2 client-resources-num-cpus=1", "--stream"]  # fmt: skip
        done = subprocess.run(run, cwd=ROOT, env=link.env, capture_output=True, text=True, timeout=420)
        started = [line for line in done.stdout.splitlines() if line.startswith("Successfully started run")]
        assert started, done.stdout[-3000:] + done.stderr[-3000:]
        listed = subprocess.run(
            [str(BIN / "flwr"), "ls", "--run-id", started[0].split()[-1], "--format", "json"],
            cwd=ROOT, env=link.env, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        status = json.loads(listed.stdout)["runs"][0]
        assert status["status"] == "finished:failed", status
        assert SAYS in status["status-details"], status
        assert not (link.folder / "empty-wrap").exists()
