"""The processes a run started, found and stopped: on a stop signal, and after a kill -9.

Ray's head processes (GCS, raylet) are started with the kernel's parent-death signal and
die with the run's process, but the agents the raylet starts (dashboard, runtime env) only
notice by polling and then try to reach the dead GCS: after a `kill -9` they outlived the
run by about 75 s. A watcher process (this file, run by path: it needs nothing but the
standard library) follows the run's descendants while it lives and, once it is gone (its
pipe closes without a word), stops those it saw. A run that ends normally says `done`
first, and nothing is stopped.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Iterable

POLL_SECONDS = 0.5  # how often the watcher looks at the run's descendants
GRACE_SECONDS = 2.0  # after SIGTERM, how long a process has before SIGKILL
DONE = b"done\n"

Process = tuple[int, int]  # (pid, start time in clock ticks): a pid reused later is another process


def _table() -> dict[Process, int]:
    """Every live process -> its parent's pid (zombies left out: they are already dead)."""
    found = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as fh:
                fields = fh.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if len(fields) > 19 and fields[0] != b"Z":
            found[(int(name), int(fields[19]))] = int(fields[1])
    return found


def descendants(roots: Iterable[int]) -> set[Process]:
    """Every live process below the pids `roots` (the roots left out)."""
    children: dict[int, list[Process]] = {}
    for process, parent in _table().items():
        children.setdefault(parent, []).append(process)
    found: set[Process] = set()
    pending = list(roots)
    while pending:
        for child in children.get(pending.pop(), []):
            if child not in found:
                found.add(child)
                pending.append(child[0])
    return found


def alive(processes: set[Process]) -> set[Process]:
    return processes & set(_table())


def terminate(processes: set[Process], grace: float = GRACE_SECONDS) -> None:
    """SIGTERM to `processes` and what they started, SIGKILL to those still alive after `grace` s."""
    processes = processes | descendants(pid for pid, _ in alive(processes))
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 0.0)):
        for pid, _ in alive(processes):
            try:
                os.kill(pid, sig)
            except (ProcessLookupError, PermissionError):
                pass
        deadline = time.monotonic() + wait
        while alive(processes) and time.monotonic() < deadline:
            time.sleep(0.05)


def start_watcher(keep: set[Process]) -> subprocess.Popen:
    """A watcher of this process: its descendants, other than `keep` (and the watcher), are
    stopped if this process dies without telling it `done`. Returns once it is watching."""
    kept = [f"{pid}:{start}" for pid, start in keep]
    watcher = subprocess.Popen(
        [sys.executable, os.path.abspath(__file__), str(os.getpid()), *kept],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    watcher.stdout.readline()  # "watching" (or nothing, if it could not start)
    watcher.stdout.close()
    return watcher


def stop_watcher(watcher: subprocess.Popen) -> None:
    """The run ended normally: the watcher leaves everything alone and exits."""
    try:
        watcher.stdin.write(DONE)
        watcher.stdin.close()
    except OSError:
        pass
    try:
        watcher.wait(timeout=5)
    except subprocess.TimeoutExpired:
        watcher.kill()
        watcher.wait()


def watch(parent: int, keep: set[Process]) -> None:
    """Follow `parent`'s descendants until its pipe (our stdin) closes; stop them unless told `done`."""
    seen: set[Process] = set()
    print("watching", flush=True)
    sys.stdout.close()
    while True:
        seen = {p for p in alive(seen) | descendants([parent]) if p[0] != os.getpid()}
        ready, _, _ = select.select([sys.stdin.buffer], [], [], POLL_SECONDS)
        if ready:
            said = os.read(sys.stdin.buffer.fileno(), 64)
            if said.startswith(DONE):
                return
            if not said:  # the run's process is gone, and never said done
                terminate(seen - keep)
                return


if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C meant for the run: the run handles it
    watch(int(sys.argv[1]), {(int(p), int(s)) for p, s in (arg.split(":") for arg in sys.argv[2:])})
