"""The first second of a command: SIGINT or SIGTERM before a run holds its folder ends in one line.

Installed before anything heavy is imported, so no moment of the command's life ends in a
traceback or a bare -15; `simulate` puts its own handler in place while it holds a folder, and
this one back after.
"""

from __future__ import annotations

import os
import signal
from types import FrameType


def stopped_early(signum: int, frame: FrameType | None) -> None:
    """One line, exit 128 + the signal (130 for SIGINT, 143 for SIGTERM)."""
    os.write(2, b"\nstopped before the run started; nothing was written\n")
    os._exit(128 + signum)


def stop_cleanly_from_now() -> None:
    for stop_signal in (signal.SIGINT, signal.SIGTERM):
        signal.signal(stop_signal, stopped_early)
