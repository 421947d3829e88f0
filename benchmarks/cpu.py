"""CPU seconds of this process, per thread: which of the driver's threads costs what.

Flower's simulation runs its polling loops as threads of the driver, named after their
targets ("Thread-7 (add_messages_to_queue)"), beside the ServerApp thread; summing CPU by
thread name tells them apart (bench_scale found the message extractor that way).
"""

from __future__ import annotations

import os
import threading
import time

_CLK = os.sysconf("SC_CLK_TCK")


def _task_cpu(tid: int) -> float:
    """utime + stime of one thread of this process, in seconds (0 if it ended)."""
    try:
        with open(f"/proc/self/task/{tid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / _CLK
    except (OSError, IndexError, ValueError):
        return 0.0


def _name(thread: threading.Thread) -> str:
    """A thread's target name when Python put it in the name, else the name's stem."""
    if "(" in thread.name:
        return thread.name.split("(", 1)[1].rstrip(")")
    return thread.name.split("-")[0]


def thread_cpu() -> dict[str, float]:
    """CPU seconds so far by thread name; threads Python did not start (Ray's, torch's) are
    summed under "other", and "total" is the whole process, threads that ended included."""
    out: dict[str, float] = {}
    known = set()
    for thread in threading.enumerate():
        if thread.native_id is None:
            continue
        known.add(thread.native_id)
        name = _name(thread)
        out[name] = out.get(name, 0.0) + _task_cpu(thread.native_id)
    for entry in os.listdir("/proc/self/task"):
        if int(entry) not in known:
            out["other"] = out.get("other", 0.0) + _task_cpu(int(entry))
    out["total"] = time.process_time()
    return out


def cpu_delta(after: dict[str, float], before: dict[str, float]) -> dict[str, float]:
    return {k: v - before.get(k, 0.0) for k, v in after.items()}
