"""Checks before anything is touched, and the lock that holds a folder for one process."""

from __future__ import annotations

import errno
import fcntl
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import PurePosixPath

from fedpfn.core.files import (
    LOCK,
    OWN_DIRS,
    WANDB,
    is_own,
    is_own_folder_inside,
    is_own_inside,
)
from fedpfn.core.places import out_problem
from fedpfn.runtime.runfolder.folder import FolderBase, RunFolderError


class FolderChecks(FolderBase):
    """Foreign files, links of either kind, special files, system places; the lock."""

    def foreign_files(self) -> list[str]:
        """Files (and folders) the tool does not write, top level and inside its own folders."""
        if not self.path.is_dir():
            return []
        foreign = []
        for relative, entry in self._walk():
            top, inside = relative.parts[0], PurePosixPath(*relative.parts[1:])
            is_dir = entry.is_dir(follow_symlinks=False)
            if len(relative.parts) == 1:
                own = is_own(top) and (is_dir or top not in OWN_DIRS)
            elif top not in OWN_DIRS or not (self.path / top).is_dir() or (self.path / top).is_symlink():
                continue  # below something already reported
            else:
                own = is_own_folder_inside(top, inside) if is_dir else is_own_inside(top, inside)
            if not own and not entry.is_symlink():
                foreign.append(relative.as_posix())
        return sorted(f for f in foreign if not any(f.startswith(other + "/") for other in foreign))

    def links(self) -> list[str]:
        """Symbolic links in the folder: writes through them would land outside it.

        W&B links its own files inside `wandb/`; those that stay inside it are its own.
        """
        if not self.path.is_dir() or self.path.is_symlink():
            return []
        wandb = os.path.realpath(self.path / WANDB)
        found = []
        for relative, entry in self._walk():
            if not entry.is_symlink():
                continue
            target = os.path.realpath(self.path / relative)
            if relative.parts[0] == WANDB and len(relative.parts) > 1 and target.startswith(wandb + os.sep):
                continue
            found.append(relative.as_posix())
        return sorted(found)

    def odd_entries(self) -> tuple[list[str], list[str]]:
        """(files with another name, hard links: an append would change it there too;
        entries neither file nor folder nor link: a FIFO would hang a read, a device...)."""
        if not self.path.is_dir() or self.path.is_symlink():
            return [], []
        linked, special = [], []
        for relative, entry in self._walk():
            if entry.is_symlink() or entry.is_dir(follow_symlinks=False):
                continue
            info = entry.stat(follow_symlinks=False)
            if not stat.S_ISREG(info.st_mode):
                special.append(relative.as_posix())
            elif info.st_nlink > 1:
                linked.append(relative.as_posix())
        return sorted(linked), sorted(special)

    def check_links(self) -> None:
        """Refuse a folder holding a link of either kind, or a FIFO, socket or device."""
        linked, special = self.odd_entries()
        for names, what, why in (
            (self.links(), "symbolic links", "writes or deletes through a link in a run folder"),
            (linked, "hard links (files with another name)", "writes a file with a name outside the folder"),
            (special, "entries that are not regular files", "reads a FIFO, socket or device in a run folder"),
        ):
            if names:
                shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
                raise RunFolderError(
                    f"out: '{self.path}' holds {what} ({shown}); fedpfn never {why}: remove them, or give "
                    "another folder"
                )

    def check_path(self) -> None:
        """The path can be looked at (not too long, not below a file we may not enter)."""
        try:
            self.path.exists()
            os.stat(self.path) if self.path.exists() else None
        except OSError as err:
            raise RunFolderError(f"out: '{self.path}' cannot be used ({err.strerror})") from None

    def check_usable(self) -> None:
        """The folder can hold a run: a directory (or creatable), writable, only our files, no links."""
        path = self.path
        if (problem := out_problem(path, "a run")) is not None:  # what every command's --out goes through
            raise RunFolderError(problem)
        self.check_links()
        foreign = self.foreign_files()
        if foreign:
            shown = ", ".join(foreign[:5]) + (f" and {len(foreign) - 5} more" if len(foreign) > 5 else "")
            raise RunFolderError(
                f"out: '{path}' holds files fedpfn did not write ({shown}); give a new or empty folder"
            )

    def check_new_run(self, overwrite: bool) -> None:
        """A new run may start here: usable, and not holding a run unless `overwrite`."""
        self.check_usable()
        if self.holds_run() and not overwrite:
            state = "a finished run" if self.is_finished() else "an unfinished run"
            raise RunFolderError(
                f"out: '{self.path}' holds {state}; pass --overwrite to replace it, or continue it with {self.resume_command()}"
            )

    # --- the lock ------------------------------------------------------------------------

    def _open_lock(self) -> int:
        try:
            return os.open(self.path / LOCK, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW, 0o666)
        except OSError as err:
            why = "it is a symbolic link" if err.errno == errno.ELOOP else err.strerror
            raise RunFolderError(f"out: cannot take {self.path / LOCK} ({why})") from None

    def remove_stale_lock(self) -> None:
        """The lock file, if no process holds its lock (one left by a stop that came between
        creating the file and locking it); a held one, this process's included, is kept."""
        try:
            fd = os.open(self.path / LOCK, os.O_WRONLY | os.O_NOFOLLOW)
        except OSError:
            return
        with os.fdopen(fd, "w") as fh:
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return
            (self.path / LOCK).unlink(missing_ok=True)

    @contextmanager
    def exclusive(self) -> Iterator[None]:
        """Hold the folder for one process: two runs writing one folder corrupt both."""
        self.check_path()
        created = not self.path.exists()
        try:
            self.path.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise RunFolderError(f"out: '{self.path}' cannot be created ({err.strerror})") from None
        try:
            self.check_links()  # again, under the lock's name: nothing is written through one
            with os.fdopen(self._open_lock(), "w") as fh:
                try:
                    fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    raise RunFolderError(f"out: '{self.path}' is in use by another running process") from None
                FolderBase._held.add(self.path.absolute())
                try:
                    yield
                finally:
                    FolderBase._held.discard(self.path.absolute())
                    with suppress(OSError):  # a folder made read-only meanwhile: its error is the one to see
                        (self.path / LOCK).unlink(missing_ok=True)
        finally:
            if created and self.path.is_dir() and not any(self.path.iterdir()):
                self.path.rmdir()  # refused before anything was written: leave no trace
