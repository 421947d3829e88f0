"""A run is a folder: resolved config, metrics per round, summary, plots, checkpoints.

What a run folder guarantees:
- `config.json` is written when a run is claimed and is what its numbers came from, with
  a `provenance` object beside the settings (fedpfn.runtime.provenance; `read_config` leaves it out);
  `summary.json` is written last (atomically), so its presence marks a finished run.
- `run.log` is what the terminal showed (fedpfn.runtime.progress), appended by every process of the run.
- `metrics.jsonl` has one strict-JSON line per finished round (no bare NaN), rounds 1..n
  in order; a line cut by a kill is the only damage tolerated, and only at the end.
- `checkpoint.npz` holds arrays and plain values only (never pickles), is replaced
  atomically, and names the settings it belongs to: a checkpoint from other settings is
  refused, never resumed.
- The folder is held by one process at a time (`.fedpfn.lock`, removed when it ends).
- The tool touches only its own files: a folder holding anything else is refused, and
  `--overwrite` removes exactly the files the tool writes (fedpfn.core.files.is_own), never
  a user's file that looks like one.
- Nothing is written or read through a link inside the folder: a folder holding a symbolic
  link (W&B's own inside `wandb/` aside), a file with another name (a hard link), or anything
  that is neither a file nor a folder (a FIFO, a device) is refused before anything is touched.
- A run folder is never made inside /dev (bar /dev/shm), /proc or /sys, however `--out` reaches it.
- Every file is read with size and nesting limits (fedpfn.core.files.read_limited), and
  what a resume reads back (metric rows, the checkpoint's round, model and arrays) is
  checked before it is used.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import io
import json
import math
import os
import shlex
import stat
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path, PurePosixPath
from typing import Any, BinaryIO, ClassVar

import numpy as np
import torch

from fedpfn.core.files import (
    CHECKPOINT,
    CLIENTS,
    CONFIG,
    LOCK,
    METRICS,
    OWN_DIRS,
    PROVENANCE,
    SUMMARY,
    WANDB,
    DamagedFile,
    append_text,
    atomic_write_bytes,
    atomic_write_json,
    is_own,
    is_own_folder_inside,
    is_own_inside,
    json_text,
    parse_json,
    read_json,
    read_jsonl,
    system_folder,
)
from fedpfn.core.settings import ConfigError


class RunFolderError(ConfigError):
    """A run folder that cannot be used as asked; the message says why and what to do."""


class RunWriteError(RunFolderError):
    """A write into the run folder failed (a full disk, a folder made read-only) mid-run."""


def fingerprint_hash(fingerprint: dict[str, Any]) -> str:
    return hashlib.sha256(json_text(fingerprint).encode()).hexdigest()


# --- state trees: nested dicts and lists of arrays and plain values, as one .npz ----------------


def _flatten(tree: Any, arrays: dict[str, np.ndarray]) -> Any:
    if isinstance(tree, np.ndarray):
        key = f"a{len(arrays)}"
        arrays[key] = tree
        return {"__array__": key}
    if isinstance(tree, dict):
        return {k: _flatten(v, arrays) for k, v in tree.items()}
    if isinstance(tree, list | tuple):
        return [_flatten(v, arrays) for v in tree]
    if tree is None or isinstance(tree, bool | int | float | str):
        return tree
    raise TypeError(f"a checkpoint holds arrays and plain values only, not {type(tree).__name__}")


def _unflatten(tree: Any, arrays: Any) -> Any:
    if isinstance(tree, dict):
        if set(tree) == {"__array__"}:
            return arrays[tree["__array__"]]
        return {k: _unflatten(v, arrays) for k, v in tree.items()}
    if isinstance(tree, list):
        return [_unflatten(v, arrays) for v in tree]
    return tree


def tree_bytes(tree: Any) -> bytes:
    arrays: dict[str, np.ndarray] = {}
    skeleton = json.dumps(_flatten(tree, arrays))
    buffer = io.BytesIO()
    np.savez(buffer, __tree__=np.frombuffer(skeleton.encode(), dtype=np.uint8), **arrays)
    return buffer.getvalue()


def _npy_header(member: BinaryIO) -> tuple[tuple[int, ...], np.dtype]:
    version = np.lib.format.read_magic(member)
    if version == (1, 0):
        shape, _, dtype = np.lib.format.read_array_header_1_0(member)
    elif version == (2, 0):
        shape, _, dtype = np.lib.format.read_array_header_2_0(member)
    else:
        raise ValueError(f"npy format {version} is not one the tool writes")
    return shape, dtype


def _read_arrays(fh: BinaryIO, only: str | None = None) -> dict[str, np.ndarray]:
    """The arrays of an .npz written by `tree_bytes`, each checked before it is allocated.

    The tool stores members uncompressed, so an array can never claim more bytes than its
    member holds: a crafted header asking for 2^40 elements is refused, not allocated;
    object arrays (pickles) are refused outright.
    """
    arrays = {}
    with zipfile.ZipFile(fh) as archive:
        for info in archive.infolist():
            name = info.filename.removesuffix(".npy")
            if only is not None and name != only:
                continue
            if info.compress_type != zipfile.ZIP_STORED or not info.filename.endswith(".npy"):
                raise ValueError(f"{info.filename} is not an array stored as the tool stores them")
            with archive.open(info) as member:
                shape, dtype = _npy_header(member)
                if dtype.hasobject or math.prod(shape) * dtype.itemsize > info.file_size:
                    raise ValueError(f"{info.filename} claims more data than it holds, or objects")
            with archive.open(info) as member:
                arrays[name] = np.lib.format.read_array(member, allow_pickle=False)
    return arrays


def _open_no_follow(path: Path) -> BinaryIO:
    """A regular file, opened without following a link or waiting on a FIFO."""
    handle = os.fdopen(os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK), "rb")
    if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
        handle.close()
        raise DamagedFile(f"{path} is not a regular file")
    return handle


def _skeleton(raw: np.ndarray, path: Path) -> Any:
    return parse_json(raw.tobytes().decode(), f"{path} (its index)")


def read_tree(path: Path) -> Any:
    """The tree saved by `tree_bytes`; refuses pickles, links and arrays larger than the file."""
    with _open_no_follow(path) as fh:
        arrays = _read_arrays(fh)
    skeleton = _skeleton(arrays.pop("__tree__"), path)
    return _unflatten(skeleton, arrays)


def read_tree_index(path: Path) -> Any:
    """The tree's plain values alone (arrays left as references): cheap, whatever the model's size."""
    with _open_no_follow(path) as fh:
        return _skeleton(_read_arrays(fh, only="__tree__")["__tree__"], path)


_TREE_ERRORS = (OSError, ValueError, KeyError, TypeError, EOFError, UnicodeDecodeError, zipfile.BadZipFile)


def checkpoint_problem(tree: dict[str, Any]) -> str | None:
    """What makes a loaded checkpoint unusable (a resume would fail or train from nonsense), or None."""
    done, elapsed = tree.get("round"), tree.get("elapsed_seconds")
    if isinstance(done, bool) or not isinstance(done, int) or done < 1:
        return f"its round is {done!r}, not a whole number >= 1"
    if isinstance(elapsed, bool) or not isinstance(elapsed, int | float) or not 0 <= elapsed < math.inf:
        return f"its elapsed_seconds is {elapsed!r}"
    model = tree.get("model")
    if not isinstance(model, dict) or not model:
        return "it holds no model"
    odd = [k for k, v in model.items() if not isinstance(v, np.ndarray) or v.dtype.kind not in "biuf"]
    if odd:
        return f"its model entry '{odd[0]}' is not a numeric array"
    if not isinstance(tree.get("strategy"), dict):
        return "it holds no strategy state"
    return None


# --- metric rows: what a resume reads back ---------------------------------------------------------


def _is_ints(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(v, int) and not isinstance(v, bool) for v in value)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


ROW_CHECKS = {  # the keys of a metrics row that a resume and the summary read back
    "clients": _is_ints,
    "failed_partitions": _is_ints,
    "missing_partitions": _is_ints,
    "skipped": lambda v: isinstance(v, bool),
    "num_failures": _is_number,
    "bytes_up": _is_number,
    "bytes_down": _is_number,
}


def row_problem(row: dict[str, Any]) -> str | None:
    """Why a metrics row cannot be read back as the tool wrote it, or None."""
    bad = [key for key, ok in ROW_CHECKS.items() if not ok(row.get(key))]
    scores = [k for k in row if k.endswith(("_accuracy", "_loss"))]
    bad += [k for k in scores if row[k] is not None and not _is_number(row[k])]
    return f"'{bad[0]}' is {row.get(bad[0])!r}" if bad else None


class RunFolder:
    _held: ClassVar[set[Path]] = set()  # the folders this process holds (`exclusive`), whichever object took them

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    def held_here(self) -> bool:
        """Whether this process holds the folder now (claimed it, and has not let it go)."""
        return self.path.absolute() in RunFolder._held

    # --- checks before anything is touched ------------------------------------------------

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
        self.check_path()
        if path.exists() and not path.is_dir():
            raise RunFolderError(f"out: '{path}' is a file; give a folder")
        if (system := system_folder(path)) is not None:
            raise RunFolderError(
                f"out: '{path}' lies in {system}, the system's, not a place for a run; give another folder"
            )
        existing = next((p for p in (path, *path.parents) if p.exists()), None)
        if existing is None or not existing.is_dir() or not os.access(existing, os.W_OK | os.X_OK):
            raise RunFolderError(f"out: '{path}' cannot be written (no write permission on '{existing}')")
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
                f"out: '{self.path}' holds {state}; pass --overwrite to replace it or --resume to continue it"
            )

    # --- lifecycle -----------------------------------------------------------------------

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
                RunFolder._held.add(self.path.absolute())
                try:
                    yield
                finally:
                    RunFolder._held.discard(self.path.absolute())
                    with suppress(OSError):  # a folder made read-only meanwhile: its error is the one to see
                        (self.path / LOCK).unlink(missing_ok=True)
        finally:
            if created and self.path.is_dir() and not any(self.path.iterdir()):
                self.path.rmdir()  # refused before anything was written: leave no trace

    def holds_run(self) -> bool:
        return (self.path / CONFIG).exists()

    def is_finished(self) -> bool:
        return (self.path / SUMMARY).exists()

    def start(
        self, config: dict[str, Any], overwrite: bool, provenance: dict[str, Any] | None = None
    ) -> None:
        """Claim the folder for a new run (call under `exclusive`, after every check)."""
        self.check_new_run(overwrite)
        self.remove_own_files()
        self.write_config(config, provenance)

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

    def _config_json(self) -> dict[str, Any]:
        return self._json_object(CONFIG, "; the run cannot be read")

    def _json_object(self, name: str, consequence: str = "") -> dict[str, Any]:
        """The run folder's JSON object `name`; damage is a RunFolderError, never a bare traceback."""
        try:
            value = read_json(self.path / name)
        except (OSError, DamagedFile) as err:
            raise RunFolderError(f"{self.path / name} is damaged ({err}){consequence}") from None
        if not isinstance(value, dict):
            raise RunFolderError(f"{self.path / name} is damaged (not a JSON object)")
        return value

    def remove_temporary(self) -> None:
        """The `*.tmp` files an atomic write left when a kill cut it short (the tool's names only)."""
        for stale in self.path.iterdir():
            if stale.name.endswith(".tmp") and is_own(stale.name):
                stale.unlink(missing_ok=True)

    def read_config(self) -> dict[str, Any]:
        """The run's settings, as `fedpfn.runtime.algorithms.parse_config` takes them (provenance left out)."""
        return {k: v for k, v in self._config_json().items() if k != PROVENANCE}

    def read_provenance(self) -> dict[str, Any]:
        """Where the run came from (fedpfn.runtime.provenance); {} for a run written before it existed."""
        value = self._config_json().get(PROVENANCE)
        return value if isinstance(value, dict) else {}

    def write_config(self, config: dict[str, Any], provenance: dict[str, Any] | None = None) -> None:
        extra = {} if provenance is None else {PROVENANCE: provenance}
        atomic_write_json(self.path / CONFIG, {**config, **extra})

    # --- metrics -------------------------------------------------------------------------

    def append_metrics(self, record: dict[str, Any], name: str = METRICS) -> None:
        append_text(self.path / name, json_text(record) + "\n")

    def sizes(self) -> dict[str, int]:
        """The metrics files' sizes now: what `truncate_to` returns them to if a round's writes fail."""
        names = [name for name in (METRICS, CLIENTS) if (self.path / name).exists()]
        return {name: (self.path / name).stat().st_size for name in names}

    def truncate_to(self, sizes: dict[str, int]) -> None:
        """Drop what was appended since `sizes` was taken (a round whose checkpoint failed)."""
        for name in (METRICS, CLIENTS):
            path = self.path / name
            if path.exists() and not path.is_symlink():
                os.truncate(path, sizes.get(name, 0))

    @contextmanager
    def writing(self) -> Iterator[None]:
        """Writes that stand or fall together (a round's rows and its checkpoint).

        If one fails (a full disk, a folder made read-only), the metrics files lose what the
        block appended, so no row is ahead of the checkpoint, and RunWriteError names the
        file and the command that continues the run once it can be written.
        """
        before = self.sizes()
        try:
            yield
        except OSError as err:
            with suppress(OSError):
                self.truncate_to(before)
            where = err.filename or f"into {self.path}"
            reason = err.strerror or str(err)
            raise RunWriteError(f"cannot write {where} ({reason}); {self.stop_message()}") from None

    def read_metrics(self) -> list[dict[str, Any]]:
        """Rounds 1..n; a last line cut by a kill is dropped, any other damage refused.

        clients.jsonl is checked too: a resume rewrites both files, and every entry point
        reads the metrics before it touches the folder.
        """
        self._client_rows()
        rows = self._read_lines(METRICS)
        for expected, row in enumerate(rows, start=1):
            if row.get("round") != expected or isinstance(row.get("round"), bool):
                raise RunFolderError(
                    f"{self.path / METRICS} is damaged: line {expected} holds round {row.get('round')}, "
                    f"expected {expected}"
                )
            problem = row_problem(row)
            if problem:
                raise RunFolderError(f"{self.path / METRICS} is damaged: line {expected}: {problem}")
        return rows

    def _read_lines(self, name: str) -> list[dict[str, Any]]:
        try:
            return read_jsonl(self.path / name)
        except DamagedFile as err:
            raise RunFolderError(f"{err}; the run cannot be resumed or read") from None

    def keep_metrics_up_to(self, last_round: int) -> None:
        """Keep rounds 1..`last_round` (what a checkpoint covers), drop later ones."""
        rows = self.read_metrics()
        if len(rows) < last_round:
            raise RunFolderError(
                f"{self.path / METRICS} holds rounds 1..{len(rows)} but the checkpoint covers 1..{last_round}; "
                "the run folder is damaged"
            )
        self._rewrite(METRICS, rows[:last_round])
        self._rewrite(CLIENTS, [row for row in self._client_rows() if row["round"] <= last_round])

    def _client_rows(self) -> list[dict[str, Any]]:
        rows = self._read_lines(CLIENTS)
        odd = next((n for n, row in enumerate(rows, 1) if not _is_ints([row.get("round")])), None)
        if odd is not None:
            raise RunFolderError(f"{self.path / CLIENTS} is damaged: line {odd} has no whole-number round")
        return rows

    def _rewrite(self, name: str, rows: list[dict[str, Any]]) -> None:
        text = "".join(json_text(r) + "\n" for r in rows)
        atomic_write_bytes(self.path / name, text.encode())

    # --- checkpoints and models ----------------------------------------------------------

    def save_checkpoint(self, fingerprint: dict[str, Any], tree: dict[str, Any]) -> None:
        meta = {"fingerprint": fingerprint, "fingerprint_sha256": fingerprint_hash(fingerprint)}
        atomic_write_bytes(self.path / CHECKPOINT, tree_bytes({"meta": meta, **tree}))

    def saved_fingerprint(self) -> dict[str, Any] | None:
        """The settings the checkpoint says it belongs to (None without a checkpoint), arrays unread."""
        path = self.path / CHECKPOINT
        if not path.exists() and not path.is_symlink():
            return None
        try:
            saved = read_tree_index(path)["meta"]["fingerprint"]
        except (*_TREE_ERRORS, DamagedFile) as err:
            raise RunFolderError(f"{path} is damaged ({type(err).__name__}); the run cannot be resumed") from None
        if not isinstance(saved, dict):
            raise RunFolderError(f"{path} is damaged (no settings); the run cannot be resumed")
        return saved

    def check_belongs(self, fingerprint: dict[str, Any]) -> bool:
        """Whether there is a checkpoint; one of other settings than `fingerprint` is refused.

        Only its index is read, so this is cheap, and it comes before anything the settings
        name is imported (fedpfn.runtime.simulation.resume_config).
        """
        saved = self.saved_fingerprint()
        if saved is None:
            return False
        keys = set(saved) | set(fingerprint)
        changed = sorted(k for k in keys if json_text(saved.get(k)) != json_text(fingerprint.get(k)))
        if changed:
            shown = ", ".join(f"{k}: {saved.get(k)} -> {fingerprint.get(k)}" for k in changed[:5])
            raise RunFolderError(
                f"{self.path / CHECKPOINT} belongs to other settings ({shown}); was config.json edited? "
                "it cannot resume this run"
            )
        return True

    def load_checkpoint(self, fingerprint: dict[str, Any]) -> dict[str, Any] | None:
        """The checkpoint of the run with these settings, None if there is none; other settings refused."""
        path = self.path / CHECKPOINT
        if not self.check_belongs(fingerprint):
            return None
        try:
            tree = read_tree(path)
            tree.pop("meta")
        except (*_TREE_ERRORS, DamagedFile) as err:
            raise RunFolderError(f"{path} is damaged ({type(err).__name__}); the run cannot be resumed") from None
        problem = checkpoint_problem(tree)
        if problem:
            raise RunFolderError(f"{path} is damaged ({problem}); the run cannot be resumed")
        return tree

    def save_model(self, server_round: int, state_dict: dict[str, torch.Tensor]) -> None:
        buffer = io.BytesIO()
        torch.save(state_dict, buffer)
        atomic_write_bytes(self.path / f"model_round_{server_round}.pt", buffer.getvalue())

    def write_summary(self, summary: dict[str, Any]) -> None:
        atomic_write_json(self.path / SUMMARY, summary)

    def read_summary(self) -> dict[str, Any]:
        return self._json_object(SUMMARY)

    def checkpoint_round(self) -> int:
        """The round the checkpoint holds (0 without one, or with a damaged one); reads only its index."""
        try:
            done = read_tree_index(self.path / CHECKPOINT)["round"]
        except (*_TREE_ERRORS, DamagedFile):
            return 0
        return done if isinstance(done, int) and not isinstance(done, bool) and done > 0 else 0

    def stop_message(self) -> str:
        """What a stopped run prints: where it stopped and how it continues."""
        try:
            done = len(self.read_metrics())
        except RunFolderError:
            done = 0
        line = f"stopped after round {done}" if done else "stopped before its first round finished"
        line += f"; continue with: python run_sim.py --resume {shlex.quote(str(self.path))}"
        restart = self.checkpoint_round()
        if restart < done:
            line += f" (from its checkpoint of round {restart})" if restart else " (from round 1: no checkpoint yet)"
        return line

    def unfinish(self) -> None:
        """Make a finished run continuable (`--resume DIR --rounds N`): its summary goes."""
        (self.path / SUMMARY).unlink(missing_ok=True)
