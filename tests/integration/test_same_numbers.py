"""Same command, same numbers: the default run's metrics.jsonl is the same byte for byte (less the
wall-clock fields) whatever the load beside it and however many cores it may use, because
`--engine-mode auto` is decided by the machine, never by a timing, and the modes it picks on the
CPU (processes on several cores, loop on one) give the same sums. The instrument is shown to
move: a mode with other arithmetic (vmap, named) gives other bytes.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

COMMAND = ["run", "--model", "mlp", "--num-clients", "8", "--clients-per-round", "4", "--rounds", "2",
           "--local-epochs", "1", "--lr", "0.1", "--momentum", "0.9", "--partition", "dirichlet", "--alpha", "0.5",
           "--batch-size", "128"]  # fmt: skip
CLOCK = ("seconds",)  # what a clock writes into a metrics row
ENV = {**os.environ, "FLWR_TELEMETRY_ENABLED": "0", "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1"}


def metrics(out: Path, *prefix: str, extra: tuple[str, ...] = ()) -> str:
    """The run's metrics.jsonl without its clock fields, as text."""
    fedpfn = str(Path(sys.executable).with_name("fedpfn"))
    done = subprocess.run([*prefix, fedpfn, *COMMAND, *extra, "--out", str(out)], env=ENV, capture_output=True,
                          text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return "\n".join(json.dumps({k: v for k, v in row.items() if k not in CLOCK}, sort_keys=True) for row in rows)


@pytest.mark.slow  # four short runs, about 40 s
@pytest.mark.skipif(shutil.which("taskset") is None, reason="taskset (util-linux) pins a run to one core")
def test_the_default_run_gives_the_same_metrics_under_load_and_on_one_core(tmp_path):
    idle = metrics(tmp_path / "idle")
    one_core = metrics(tmp_path / "one-core", "taskset", "-c", "0")
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        loaded = metrics(tmp_path / "loaded")
    finally:
        busy.kill()
    assert one_core == idle and loaded == idle
    config = json.loads((tmp_path / "idle" / "config.json").read_text())
    assert config["engine_mode"] == "processes"  # what computed them, recorded
    assert json.loads((tmp_path / "one-core" / "config.json").read_text())["engine_mode"] == "loop"
    assert metrics(tmp_path / "vmap", extra=("--engine-mode", "vmap")) != idle  # other sums: other bytes
