"""The bound every call of a user's code mid-run goes through (fedpfn.core.user_code.within, issue
58): it returns what the call returned, re-raises what it raised, or gives up at its bound and
leaves the call behind in a daemon thread."""

from __future__ import annotations

import threading
import time

import pytest

from fedpfn.core.user_code import NoReturn, within


def exits() -> None:
    raise SystemExit(3)


def test_within_gives_the_result_or_what_was_raised() -> None:
    assert within(5, "adding", lambda a, b: a + b, 2, 3) == 5
    with pytest.raises(SystemExit) as stop:
        within(5, "exiting", exits)
    assert stop.value.code == 3
    assert within(None, "unbounded", lambda: "done") == "done"


def test_within_gives_up_at_its_bound_and_leaves_the_call_behind() -> None:
    released = threading.Event()
    started = time.monotonic()
    try:
        with pytest.raises(NoReturn, match=r"^a hang did not return within 0.5 s \(round_timeout\)$"):
            within(0.5, "a hang", released.wait)
        assert time.monotonic() - started < 5
        assert any(t.name == "fedpfn-user-code" and t.daemon for t in threading.enumerate())
    finally:
        released.set()  # the abandoned call (a daemon thread) ends with it
