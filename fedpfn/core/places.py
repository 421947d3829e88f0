"""Where a command may write: the one check every `--out` goes through.

`fedpfn run`, `compare`, `report`, `align`, `pretrain`, `soup` and `cold` all ask `out_problem`
before anything is computed or written, so a folder one of them refuses is refused by every
other in the same words: a path that cannot be looked at, a file, a place under /dev, /proc or
/sys however it is reached (links, `..`, /dev/shm/..), or one that cannot be created or
written (no permission, a read-only file system).
"""

from __future__ import annotations

import os
from pathlib import Path

SYSTEM_FOLDERS = ("/dev", "/proc", "/sys")  # the kernel's and devices' (/dev/shm, plain memory, aside)


def system_folder(path: Path) -> str | None:
    """The system folder (/dev, /proc, /sys) that `path` resolves into, links and `..` followed; else None."""
    real = os.path.realpath(path)
    if real == "/dev/shm" or real.startswith("/dev/shm/"):
        return None
    return next((top for top in SYSTEM_FOLDERS if real == top or real.startswith(top + "/")), None)


def _nearest_existing(path: Path) -> Path:
    """`path` or the closest folder above it that exists (`.` or `/` at worst)."""
    return next((p for p in (path, *path.parents) if p.exists() or p.is_symlink()), Path(path.anchor or "."))


def _unwritable(path: Path, existing: Path) -> str | None:
    """Why nothing can be created at `path` below `existing` (its nearest existing part), or None."""
    if not existing.is_dir():
        kind = "a file" if existing.is_file() else "not a folder"
        return f"out: '{path}' cannot be written ('{existing}' is {kind}, so it cannot be created)"
    try:
        read_only = bool(os.statvfs(existing).f_flag & os.ST_RDONLY)
    except OSError:
        read_only = False
    if read_only:
        return f"out: '{path}' cannot be written ('{existing}' is on a read-only file system)"
    if not os.access(existing, os.W_OK | os.X_OK):
        return f"out: '{path}' cannot be written (no write permission on '{existing}')"
    return None


def out_problem(path: Path, what: str) -> str | None:
    """Why the folder `path` cannot take `what` (a run, or a command's files), as one line
    starting 'out: ', or None; nothing is created, followed into or written."""
    try:
        exists = path.exists()
        if exists:
            os.stat(path)
    except OSError as err:  # a name too long, a folder below one we may not enter
        return f"out: '{path}' cannot be used ({err.strerror})"
    if exists and not path.is_dir():
        return f"out: '{path}' is a file; give a folder"
    if (system := system_folder(path)) is not None:
        return f"out: '{path}' lies in {system}, the system's, not a place for {what}; give another folder"
    return _unwritable(path, path if exists else _nearest_existing(path))
