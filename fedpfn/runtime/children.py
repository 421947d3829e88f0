"""The Python processes a command starts, with nothing of the user's current folder first on `sys.path`.

A `torch.py` (or any module) left in the folder a user runs from would shadow the installed one
in a child that searched that folder first, and run as the child starts. Every child fedpfn
starts goes through here: Ray's workers (fedpfn.runtime.engines.ray_start, started from an
empty folder of their own and given `child_pythonpath`) and the commands run as subprocesses
(`fedpfn study run --jobs N`'s cells, `fedpfn cold`'s runs: `python_child`), which start with
`python -P` (no current folder, no script folder on `sys.path`) and the same PYTHONPATH. A
subprocess keeps the user's folder as its working folder, so a relative path means what it meant
to the command; a user's own module named on the command line is still found there, after the
installed packages (fedpfn.core.user_code appends the folder last).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from typing import Any

STOP_SECONDS = 30.0  # a child asked to stop (SIGINT) and not gone by then is killed


def child_pythonpath() -> str:
    """This process's `sys.path` for a child, with the current folder (and '') moved last."""
    here = os.path.realpath(os.getcwd())
    entries = [p for p in sys.path if p]
    current = [p for p in entries if os.path.realpath(p) == here]
    return os.pathsep.join([p for p in entries if p not in current] + current[:1])


def python_child(*args: str) -> tuple[list[str], dict[str, str]]:
    """The command line and environment of a Python child running `args` (`-m fedpfn.cli.main ...`)."""
    return [sys.executable, "-P", *args], {**os.environ, "PYTHONPATH": child_pythonpath()}


class Children:
    """The child processes a command runs at once (`fedpfn study run --jobs N`'s cells). On the
    command's stop, none starts any more and each running one is asked to stop as Ctrl-C asks
    (SIGINT: a run stops after its round, resumable), then killed where it has not within
    STOP_SECONDS: so a stopped command leaves no child behind, however it was signalled."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._running: set[subprocess.Popen[Any]] = set()
        self._stopping = False

    def run(self, argv: list[str], **popen: Any) -> int | None:
        """`argv`'s exit code; None where the command was stopping and it did not start."""
        with self._lock:
            if self._stopping:
                return None
            child = subprocess.Popen(argv, **popen)
            self._running.add(child)
        try:
            return child.wait()
        finally:
            with self._lock:
                self._running.discard(child)

    def stop(self) -> int:
        """Every running child asked to stop, and killed after STOP_SECONDS; how many were running."""
        with self._lock:
            self._stopping = True
            running = list(self._running)
        for child in running:
            child.send_signal(signal.SIGINT)
        deadline = time.monotonic() + STOP_SECONDS
        for child in running:
            try:
                child.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()
        return len(running)
