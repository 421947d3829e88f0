"""A round's files written while the next round trains.

Why: each round appends its rows and replaces its checkpoint durably (three fsyncs, about 16 ms
on the development machine's disk), which is a large share of a round of small clients, and the
server has nothing to do while its clients train. The writes of round r run on a thread of
their own during round r+1; the next round's writes wait for them, so the files are written in
the order, and to the states, they would be one after another, and at most one round is behind.
What is written is made before it is handed over (rows, checkpoint bytes): nothing the next
round changes reaches the files. The run's tracker hears of a round after its files are
written, on the same thread (its progress line and logging leave the run's path too). A failed write is raised in the run's thread, at the next
round's hand-over or at the end, with the message RunFolder.writing gives.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from types import TracebackType


class WritesBehind:
    """One write at a time on a thread of its own, each waiting for the one before."""

    def __init__(self) -> None:
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="fedpfn-writes")
        self._pending: Future[None] | None = None

    def submit(self, write: Callable[[], None]) -> None:
        """`write` started once the previous one is done (its error raised here)."""
        self.wait()
        self._pending = self._pool.submit(write)

    def wait(self) -> None:
        """Until the write in flight is done; its error, if it failed."""
        pending, self._pending = self._pending, None
        if pending is not None:
            pending.result()

    def __enter__(self) -> WritesBehind:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None) -> None:
        """The last write finished before the run goes on (or stops: a stopped run keeps its last
        round); a write's error raised unless the run is already raising one."""
        try:
            if kind is None:
                self.wait()
            elif self._pending is not None:
                self._pending.exception()  # waited for; the run's own error is the one to raise
        finally:
            self._pool.shutdown(wait=True)
