"""WritesBehind (a round's files written while the next round trains): writes in the order
handed over, one at a time, the last one finished when the block ends, a failed write raised in
the run's thread, and the run's own error never hidden by a write's."""

from __future__ import annotations

import threading
import time

import pytest

from fedpfn.runtime.runfolder.behind import WritesBehind


def test_writes_run_in_order_one_at_a_time_and_the_last_is_done_at_the_end():
    done, busy = [], threading.Lock()

    def write(k: int) -> None:
        assert busy.acquire(blocking=False), "two writes at once"
        time.sleep(0.01 * (3 - k))  # the first is the slowest: order must not come from timing
        done.append(k)
        busy.release()

    with WritesBehind() as writes:
        for k in range(3):
            writes.submit(lambda k=k: write(k))
    assert done == [0, 1, 2]


def test_a_failed_write_is_raised_at_the_next_hand_over_or_at_the_end():
    def full() -> None:
        raise OSError(28, "No space left on device")

    with pytest.raises(OSError, match="No space left"), WritesBehind() as writes:
        writes.submit(full)
        writes.submit(lambda: None)  # waits for the first: its error here
    with pytest.raises(OSError, match="No space left"), WritesBehind() as writes:
        writes.submit(full)  # the last write: its error when the block ends


def test_the_runs_own_error_is_the_one_raised_and_the_write_still_finishes():
    done = []

    def slow() -> None:
        time.sleep(0.05)
        done.append(True)

    with pytest.raises(KeyboardInterrupt), WritesBehind() as writes:
        writes.submit(slow)
        raise KeyboardInterrupt  # Ctrl-C while the next round trains
    assert done == [True]  # a stopped run keeps its last round's files
