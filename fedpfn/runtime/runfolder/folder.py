"""What every part of a run folder stands on: its path, its errors, its walk, its own files."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path, PurePosixPath
from typing import Any, ClassVar

from fedpfn.core.files import (
    CONFIG,
    LOCK,
    OWN_DIRS,
    WANDB,
    DamagedFile,
    is_finished,
    is_own,
    is_own_folder_inside,
    is_own_inside,
    read_json,
)
from fedpfn.core.settings import ConfigError


class RunFolderError(ConfigError):
    """A run folder that cannot be used as asked; the message says why and what to do."""


class RunWriteError(RunFolderError):
    """A write into the run folder failed (a full disk, a folder made read-only) mid-run."""


class FolderBase:
    """The folder's path and what every concern reads through (see the package docstring)."""

    _held: ClassVar[set[Path]] = set()  # the folders this process holds (`exclusive`), whichever object took them

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    def held_here(self) -> bool:
        """Whether this process holds the folder now (claimed it, and has not let it go)."""
        return self.path.absolute() in FolderBase._held

    def holds_run(self) -> bool:
        return (self.path / CONFIG).exists()

    def is_finished(self) -> bool:
        return is_finished(self.path)

    def _walk(self) -> Iterator[tuple[PurePosixPath, os.DirEntry]]:
        """Every entry below the folder (relative path, entry), links reported, never followed."""
        pending = [PurePosixPath()]
        while pending:
            relative = pending.pop()
            with os.scandir(self.path / relative) as entries:
                for entry in entries:
                    inner = relative / entry.name
                    yield inner, entry
                    if entry.is_dir(follow_symlinks=False):
                        pending.append(inner)

    def _json_object(self, name: str, consequence: str = "") -> dict[str, Any]:
        """The run folder's JSON object `name`; damage is a RunFolderError, never a bare traceback."""
        try:
            value = read_json(self.path / name)
        except (OSError, DamagedFile) as err:
            raise RunFolderError(f"{self.path / name} is damaged ({err}){consequence}") from None
        if not isinstance(value, dict):
            raise RunFolderError(f"{self.path / name} is damaged (not a JSON object)")
        return value

    def remove_own_files(self) -> None:
        """Remove exactly what the tool wrote (the lock aside): its files, then its emptied folders."""
        entries = sorted(self._walk(), key=lambda item: len(item[0].parts), reverse=True)
        for relative, entry in entries:
            top, inside = relative.parts[0], PurePosixPath(*relative.parts[1:])
            path = self.path / relative
            if entry.is_dir(follow_symlinks=False):
                own = is_own(top) if not inside.parts else is_own_folder_inside(top, inside)
                if own and not any(path.iterdir()):
                    path.rmdir()
                continue
            if not inside.parts:
                own = is_own(top) and top not in (LOCK, *OWN_DIRS)
            else:
                own = is_own_inside(top, inside) or (top == WANDB and entry.is_symlink())
            if own:
                path.unlink()

    def remove_temporary(self) -> None:
        """The `*.tmp` files an atomic write left when a kill cut it short (the tool's names only)."""
        for stale in self.path.iterdir():
            if stale.name.endswith(".tmp") and is_own(stale.name):
                stale.unlink(missing_ok=True)
