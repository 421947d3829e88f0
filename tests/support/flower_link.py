"""A simulation SuperLink of its own for `flwr run .`: the tests' and bench_routes' shared set-up.

`flower-superlink --simulation` with in-memory state on a free port in 9400-9499, with its own
FLWR_HOME (whose config.toml names it as the default SuperLink) and its own working folder
(where a relative `out` lands). Stopped as one process group, with the simulation it started.
"""

from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

BIN = Path(sys.executable).parent


@dataclass
class Link:
    env: dict[str, str]
    folder: Path  # the SuperLink's working folder: relative `out` lands here
    process: subprocess.Popen


def free_port() -> int:
    """A port in 9400-9499 nobody listens on (the range this project's tests use)."""
    for port in random.sample(range(9400, 9500), 100):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
                return port
            except OSError:
                continue
    raise RuntimeError("no free port in 9400-9499")


def wait_for_port(port: int, process: subprocess.Popen, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"flower-superlink exited with {process.returncode}")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.3)
    raise RuntimeError(f"flower-superlink did not listen on {port} within {timeout:.0f} s")


def stop_group(process: subprocess.Popen) -> None:
    """SIGTERM to the SuperLink's process group (it and the simulation it started), then SIGKILL."""
    for sig, wait in ((signal.SIGTERM, 15), (signal.SIGKILL, 5)):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        try:
            process.wait(wait)
            return
        except subprocess.TimeoutExpired:
            continue


@contextmanager
def simulation_superlink(base: Path) -> Iterator[Link]:
    """A running simulation SuperLink under `base` (home/, link/, superlink.log), stopped on exit."""
    home, folder = base / "home", base / "link"
    home.mkdir(parents=True)
    folder.mkdir()
    port = free_port()
    (home / "config.toml").write_text(
        f'[superlink]\ndefault = "test"\n\n[superlink.test]\naddress = "127.0.0.1:{port}"\ninsecure = true\n'
    )
    env = {
        **os.environ,
        "FLWR_HOME": str(home),
        "PATH": f"{BIN}:{os.environ.get('PATH', '')}",
        "FLWR_TELEMETRY_ENABLED": "0",
        "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1",
        "FLWR_DISABLE_UPDATE_CHECK": "1",
    }
    command = [BIN / "flower-superlink", "--insecure", "--simulation", "--host", "127.0.0.1", "--port", str(port)]
    with open(base / "superlink.log", "w") as log:  # its own process group: stopped as one below
        process = subprocess.Popen(
            command, cwd=folder, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        wait_for_port(port, process)
        yield Link(env, folder, process)
    finally:
        stop_group(process)
