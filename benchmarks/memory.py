"""Memory of a whole simulation: this process and every process it started, summed.

A Ray simulation's memory is spread over the driver, Ray's own processes and one actor per
concurrent client, so one process's peak says little. This samples the summed RSS of the
process tree in a thread, read from /proc (Linux only, like the rest of the benchmarks).
"""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
import threading
import time
from dataclasses import dataclass, field
from typing import Self

_PAGE = os.sysconf("SC_PAGE_SIZE")


def descendants(pid: int) -> list[int]:
    """Every process below `pid`, from the parent ids in /proc/*/stat."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as fh:
                stat = fh.read()
        except OSError:
            continue  # ended meanwhile
        parent = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(parent, []).append(int(entry))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def resident(pid: int) -> tuple[int, int]:
    """(RSS, anonymous RSS) in bytes: statm's resident pages, and those less file/shmem pages."""
    with open(f"/proc/{pid}/statm") as fh:
        fields = fh.read().split()
    pages, shared = int(fields[1]), int(fields[2])
    return pages * _PAGE, (pages - shared) * _PAGE


def proportional(pid: int) -> int:
    """PSS in bytes (/proc/PID/smaps_rollup): each shared page divided among the processes that map
    it, so processes forked from one driver (its dataset's pages shared copy-on-write) sum to what
    they hold together, which summed RSS counts once per process."""
    with open(f"/proc/{pid}/smaps_rollup") as fh:
        for line in fh:
            if line.startswith("Pss:"):
                return int(line.split()[1]) * 1024
    return 0


def role(pid: int) -> str:
    """driver, actor (ClientAppActor), idle-worker, ray-worker, ray-core or other."""
    if pid == os.getpid():
        return "driver"
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            cmd = fh.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return "other"
    if "ClientAppActor" in cmd:
        return "actor"
    if cmd.startswith("ray::IDLE") or "default_worker.py" in cmd:
        return "idle-worker"
    if cmd.startswith("ray::"):
        return "ray-worker"
    if any(k in cmd for k in ("gcs_server", "raylet", "log_monitor", "monitor.py", "dashboard", "ray/")):
        return "ray-core"
    return "other"


@dataclass
class MemorySample:
    t: float  # time.time()
    rss: int
    anon: int
    pss: int
    by_role: dict[str, int]
    processes: int


class BackgroundSampler(ABC):
    """Calls `sample()` every `interval` seconds in a daemon thread, inside a `with` block."""

    interval: float

    @abstractmethod
    def sample(self) -> object:
        """One reading; called from the sampling thread."""

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(self.interval)

    def __enter__(self) -> Self:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=type(self).__name__, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


@dataclass
class TreeMemory(BackgroundSampler):
    """Peak of the summed RSS of this process and all its descendants, sampled in a thread.

    RSS counts shared library pages once per process (libtorch is mapped by the driver and
    by every Ray worker), so the anonymous part is reported next to it: that sum
    double-counts nothing except Ray's plasma store, which is shared memory and so falls
    out of it entirely. One sample reads a few small /proc files per process.
    """

    interval: float = 0.2
    samples: list[MemorySample] = field(default_factory=list)
    include_self: bool = True  # False: only the processes this one started (a command measured from outside)

    def __post_init__(self) -> None:
        self._roles: dict[int, str] = {}

    def sample(self) -> MemorySample:
        rss = anon = pss = 0
        by_role: dict[str, int] = {}
        pids = [os.getpid()] * self.include_self + descendants(os.getpid())
        for pid in pids:
            try:
                r, a = resident(pid)
                p = proportional(pid)
            except (OSError, ValueError, IndexError):
                continue
            kind = self._roles.get(pid)
            if kind is None or kind in ("idle-worker", "other"):  # an idle worker may become an actor
                kind = self._roles[pid] = role(pid)
            rss += r
            anon += a
            pss += p
            by_role[kind] = by_role.get(kind, 0) + r
        s = MemorySample(time.time(), rss, anon, pss, by_role, len(pids))
        self.samples.append(s)
        return s

    def peak(self, since: float = float("-inf"), until: float = float("inf")) -> MemorySample | None:
        """The sample of highest summed RSS between two `time.time()` moments."""
        window = [s for s in self.samples if since <= s.t <= until]
        return max(window, key=lambda s: s.rss) if window else None

    def peak_pss(self) -> int:
        """The highest summed PSS sampled: the tree's memory with shared pages counted once."""
        return max((s.pss for s in self.samples), default=0)

    def peak_anon(self, since: float = float("-inf"), until: float = float("inf")) -> int:
        return max((s.anon for s in self.samples if since <= s.t <= until), default=0)
