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
import sys


def child_pythonpath() -> str:
    """This process's `sys.path` for a child, with the current folder (and '') moved last."""
    here = os.path.realpath(os.getcwd())
    entries = [p for p in sys.path if p]
    current = [p for p in entries if os.path.realpath(p) == here]
    return os.pathsep.join([p for p in entries if p not in current] + current[:1])


def python_child(*args: str) -> tuple[list[str], dict[str, str]]:
    """The command line and environment of a Python child running `args` (`-m fedpfn.cli.main ...`)."""
    return [sys.executable, "-P", *args], {**os.environ, "PYTHONPATH": child_pythonpath()}
