"""The names of a run folder's files and how they are written and read, for every part that uses one.

The run folder itself (checks, lock, checkpoints, resume) is `fedpfn.runtime.runfolder`; the
clients' state files (clients/state.py), the reports (fedpfn.analysis) and the scripts take
the names from here, so a name is written once.

Files in a run folder may come from anyone who could write there (a shared or downloaded
folder, a careless edit), so they are written and read without ever following a symbolic
link, read with size and nesting limits, and never run: `enclosing_run_folder` lets the
import of a user's module refuse code that lies in one.
"""

from __future__ import annotations

import errno
import hashlib
import importlib.machinery
import importlib.util
import json
import math
import os
import re
import stat
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path, PurePosixPath
from typing import Any

CONFIG = "config.json"
PROVENANCE = "provenance"  # the key in config.json beside the settings
METRICS = "metrics.jsonl"
CLIENTS = "clients.jsonl"
SUMMARY = "summary.json"
CHECKPOINT = "checkpoint.npz"
CLIENT_STATE = "client_state"
LOG = "run.log"
LOCK = ".fedpfn.lock"
TENSORBOARD = "tensorboard"
WANDB = "wandb"
PARTITION = "partition.json"  # each client's label counts, written as a new run starts
COMPARISON_CONFIG = "comparison_config.json"  # what `--compare` was asked, in a comparison folder
REPORT = "report"  # fedpfn report's files (report.md, .csv, .json, figures), in a run folder when of it alone
OUTPUTS_MANIFEST = ".fedpfn-outputs.json"  # name -> sha256 of what the tool last wrote there
FIGURES = ("partition", "accuracy", "clients")  # written as .png (and .pdf or .svg)
PARTITION_FIGURE, ACCURACY_FIGURE = "partition.png", "accuracy.png"
MODEL_ROUND = re.compile(r"model_round_(\d+)\.pt")  # the global model after a round (0: the initial one)
STATE_ROUND = re.compile(r"r(\d+)\.npz")  # a client's state after a round: client_state/<partition>/<key>/
MAX_JSON_BYTES = 256 << 20  # config.json, summary.json, metrics.jsonl and clients.jsonl of any real run
MAX_JSON_DEPTH = 64  # the tool writes at most 4 levels

# --- which files are the tool's: it replaces or removes these and nothing else --------------------

_TMP = r"(\.tmp)?"
_OWN_NAMES = (CONFIG, METRICS, CLIENTS, SUMMARY, CHECKPOINT, LOG, LOCK, PARTITION)
_OWN_TOP = (
    re.compile("(" + "|".join(map(re.escape, _OWN_NAMES)) + ")" + _TMP),
    re.compile("(" + "|".join(FIGURES) + r")\.(png|pdf|svg)" + _TMP),
    re.compile(MODEL_ROUND.pattern + _TMP),
    re.compile(rf"({REPORT}\.(md|csv|json)|({REPORT}|{REPORT}_bytes|paired_differences)\.(png|pdf|svg)"
               rf"|{re.escape(OUTPUTS_MANIFEST)}){_TMP}"),  # fmt: skip
)
_STATE_FILE = re.compile(r"\d+/[A-Za-z0-9_.-]+/" + STATE_ROUND.pattern + _TMP)  # <partition>/<key>/r<round>.npz
_WANDB_TOP = re.compile(r"(offline-)?run-[A-Za-z0-9_-]+|latest-run|debug[A-Za-z0-9_.-]*\.log")
OWN_DIRS = (CLIENT_STATE, TENSORBOARD, WANDB)


def model_file(server_round: int | str) -> str:
    """The file of the global model saved after `server_round` (matches MODEL_ROUND; a page may pass "<last>")."""
    return f"model_round_{server_round}.pt"


def state_file(server_round: int) -> str:
    """The file of a client's state record after `server_round` (matches STATE_ROUND)."""
    return f"r{server_round}.npz"


def is_own(name: str) -> bool:
    """A name the tool writes at the top of a run folder (its folders included)."""
    return name in OWN_DIRS or any(pattern.fullmatch(name) for pattern in _OWN_TOP)


def is_own_inside(folder: str, relative: PurePosixPath) -> bool:
    """A file below one of the tool's folders that the tool (or TensorBoard, or W&B) wrote there."""
    if folder == CLIENT_STATE:
        return bool(_STATE_FILE.fullmatch(relative.as_posix()))
    if folder == TENSORBOARD:
        return relative.name.startswith("events.out.tfevents.")
    if folder == WANDB:  # its own layout, which changes between releases: its run folders, logs, links
        return bool(_WANDB_TOP.fullmatch(relative.parts[0]))
    return False


def is_own_folder_inside(folder: str, relative: PurePosixPath) -> bool:
    """A folder below one of the tool's folders that may hold the tool's files."""
    if folder == CLIENT_STATE:
        return len(relative.parts) <= 2 and relative.parts[0].isdigit()
    return folder == TENSORBOARD or (folder == WANDB and bool(_WANDB_TOP.fullmatch(relative.parts[0])))


# --- writing -------------------------------------------------------------------------------------


def _open_new(path: Path) -> int:
    """A new file at `path`: an existing one, or a link planted there, is removed first
    (the name is the tool's: only the link goes, never what it points to)."""
    path.unlink(missing_ok=True)
    return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o666)


_WRITING = threading.RLock()  # held by every write below; a stopping process takes it for good


def stop_writing(timeout: float = 2.0) -> bool:
    """From now on this process writes nothing through this module: the write in flight
    finishes, later ones wait until the process exits. A stop signal calls this before it
    stops the run's workers, whose failures would otherwise be recorded as a round.
    False: a write did not finish within `timeout`, and this thread may not write either."""
    return _WRITING.acquire(timeout=timeout)


@contextmanager
def _naming(path: Path) -> Iterator[None]:
    """An OSError of a write into `path` names `path` (a failed write() names no file at all)."""
    try:
        yield
    except OSError as err:
        if err.filename is not None and not str(err.filename).endswith(".tmp"):
            raise
        raise OSError(err.errno, err.strerror, str(path)) from err


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write then rename, so a reader never sees half a file (even after kill -9).

    A failed write (a full disk) leaves no temporary file and names `path`; a link at
    `path` is replaced, never written through.
    """
    tmp = path.with_name(path.name + ".tmp")
    with _WRITING, _naming(path):
        try:
            with os.fdopen(_open_new(tmp), "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, path)
        except BaseException:
            with suppress(OSError):
                tmp.unlink(missing_ok=True)
            raise


def append_text(path: Path, text: str) -> None:
    """Append `text` durably; a link at `path` is refused (OSError ELOOP), never followed, and
    so is a file with another name (a hard link: the append would land there too)."""
    with _WRITING, _naming(path):
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o666)
        if os.fstat(fd).st_nlink > 1:
            os.close(fd)
            raise OSError(errno.EMLINK, "it has another name (a hard link): fedpfn never writes one", str(path))
        with os.fdopen(fd, "a") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())


def strict_json(value: Any) -> Any:
    """NaN and infinities as null, so every line is JSON that any reader accepts."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: strict_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [strict_json(v) for v in value]
    return value


def json_text(value: Any, indent: int | None = None) -> str:
    return json.dumps(strict_json(value), sort_keys=True, allow_nan=False, indent=indent)


def atomic_write_json(path: Path, value: Any) -> None:
    atomic_write_bytes(path, (json_text(value, indent=2) + "\n").encode())


# --- reading -------------------------------------------------------------------------------------


class DamagedFile(ValueError):
    """A file that cannot be read as what it should be; the message says where and why."""


def read_limited(path: Path, max_bytes: int) -> bytes:
    """The bytes of the regular file at `path`: never through a link, never more than `max_bytes`.

    A FIFO or a device (`/dev/zero`) is refused before anything is read. FileNotFoundError
    passes through, for callers to whom a missing file means something.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        raise
    except OSError as err:
        reason = "a symbolic link, which fedpfn never follows" if err.errno == errno.ELOOP else err.strerror
        raise DamagedFile(f"cannot read {path}: {reason}") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):  # before fdopen, which refuses a folder with its own error
        os.close(fd)
        raise DamagedFile(f"cannot read {path}: not a regular file")
    with os.fdopen(fd, "rb") as fh:
        data = fh.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise DamagedFile(f"cannot read {path}: larger than {max_bytes} bytes")
    return data


def not_a_plain_file(path: Path) -> str | None:
    """Why `path` is no regular file to read (missing, a link, a FIFO, a device), or None; nothing is
    opened, for readers that open by name (numpy's memory map, a safetensors file)."""
    try:
        mode = os.lstat(path).st_mode
    except OSError as err:
        return f"cannot read {path}: {err.strerror}"
    if stat.S_ISLNK(mode):
        return f"cannot read {path}: a symbolic link, which fedpfn never follows"
    return None if stat.S_ISREG(mode) else f"cannot read {path}: not a regular file"


_JSON_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
_BRACKETS = re.compile(r"[\[\]{}]")


def nesting_depth(text: str) -> int:
    """How deeply JSON text nests arrays and objects (brackets inside strings do not count)."""
    depth = deepest = 0
    for bracket in _BRACKETS.findall(_JSON_STRING.sub("", text)):
        depth += 1 if bracket in "[{" else -1
        deepest = max(deepest, depth)
    return deepest


def parse_json(text: str, where: str) -> Any:
    """JSON text, refused (DamagedFile naming `where`) when invalid or nested beyond MAX_JSON_DEPTH."""
    if nesting_depth(text) > MAX_JSON_DEPTH:
        raise DamagedFile(f"{where} nests deeper than {MAX_JSON_DEPTH} levels")
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        raise DamagedFile(f"{where} is not valid JSON ({err.msg} at line {err.lineno})") from None
    except ValueError:  # an integer of more digits than Python converts (sys.get_int_max_str_digits)
        raise DamagedFile(f"{where} holds a number too long to read") from None


def _text(path: Path, max_bytes: int) -> str:
    data = read_limited(path, max_bytes)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise DamagedFile(f"{path} is not UTF-8 text") from None


def read_json(path: Path, max_bytes: int = MAX_JSON_BYTES) -> Any:
    """A JSON file read through `read_limited` and `parse_json`."""
    return parse_json(_text(path, max_bytes), str(path))


def read_jsonl(path: Path, max_bytes: int = MAX_JSON_BYTES) -> list[dict[str, Any]]:
    """The complete lines of a JSON-lines file as objects ([] when it does not exist).

    The text after the last newline is a line cut by a kill (that round never finished)
    and is left out; any other line that is not a JSON object raises DamagedFile.
    """
    try:
        text = _text(path, max_bytes)
    except FileNotFoundError:
        return []
    if nesting_depth(text) > MAX_JSON_DEPTH:
        raise DamagedFile(f"{path} nests deeper than {MAX_JSON_DEPTH} levels")
    rows = []
    for number, line in enumerate(text.split("\n")[:-1], start=1):
        try:
            row = json.loads(line)
        except ValueError:  # not JSON, or an integer too long to convert
            row = None
        if not isinstance(row, dict):
            raise DamagedFile(f"{path} is damaged at line {number}")
        rows.append(row)
    return rows


# --- run folders hold data, never code -----------------------------------------------------------


def holds_run(folder: Path) -> bool:
    """Whether `folder` is a run folder (config.json beside another file of a run) or a comparison's."""
    try:
        if (folder / COMPARISON_CONFIG).is_file():
            return True
        return (folder / CONFIG).is_file() and any(
            (folder / name).exists() for name in (METRICS, CHECKPOINT, SUMMARY, LOG, LOCK, CLIENT_STATE)
        )
    except OSError:  # a name too long, a folder we may not list: not a run folder we can tell
        return False


def is_finished(folder: Path) -> bool:
    """Whether the run in `folder` finished: summary.json is written last, atomically, and only then."""
    return (folder / SUMMARY).is_file()


def enclosing_run_folder(path: Path) -> Path | None:
    """The run (or comparison) folder that `path` lies in, if any (`path` itself included)."""
    path = Path(os.path.realpath(path))
    return next((folder for folder in (path, *path.parents) if holds_run(folder)), None)


def module_locations(name: str) -> list[Path]:
    """Every place the import of module `name` (dotted) could read code from, found without running any.

    The top-level package is located as the import system does (which runs nothing); each
    part below it is looked up in its parent's folders on disk, as the path finder would.
    A package's __init__ inside a run folder must be refused before it runs, not after.
    """
    parts = name.split(".")
    loaded = sys.modules.get(parts[0])
    spec = getattr(loaded, "__spec__", None) if loaded is not None else importlib.util.find_spec(parts[0])
    if spec is None:
        return []
    search = [Path(p) for p in spec.submodule_search_locations or []]
    locations = ([Path(spec.origin)] if spec.origin and spec.has_location else []) + search
    for part in parts[1:]:
        search = [folder / part for folder in search if (folder / part).is_dir()]
        files = [folder / (part + ending) for folder in search for ending in importlib.machinery.all_suffixes()]
        locations += search + [f for f in files if f.is_file()]
    return locations


# --- the tool's own outputs in a folder it shares with its user -----------------------------------


class OwnOutputs:
    """Files a command writes into a folder that may hold its user's files too (a report's
    folder, a comparison's): it replaces only what it wrote itself, byte for byte unchanged
    since, as recorded in OUTPUTS_MANIFEST; a user's file, or a link, under one of its
    names is refused before anything is written. `legacy` recognises the command's own
    files written before the manifest existed (by their content).
    """

    def __init__(self, folder: Path, command: str, legacy: Callable[[Path], bool] | None = None) -> None:
        self.folder = folder
        self.command = command
        self.legacy = legacy

    def _manifest(self) -> dict[str, str]:
        try:
            value = read_json(self.folder / OUTPUTS_MANIFEST, 1 << 20)
        except (FileNotFoundError, DamagedFile):
            return {}  # then nothing there counts as the tool's by the manifest
        return {k: v for k, v in value.items() if isinstance(v, str)} if isinstance(value, dict) else {}

    def _is_ours(self, path: Path) -> bool:
        recorded = self._manifest().get(path.name)
        if recorded is not None:
            return recorded == _sha256(path)
        return self.legacy is not None and self.legacy(path)

    def problem(self, name: str) -> str | None:
        """Why `name` may not be written here, or None."""
        path = self.folder / name
        if path.is_symlink():
            return f"out: {path} is a symbolic link; {self.command} writes no file through a link"
        if path.exists() and not (path.is_file() and self._is_ours(path)):
            return (
                f"out: {path} was not written by {self.command} (or was changed since); "
                "move it, or give another --out"
            )
        return None

    def check(self, names: list[str]) -> None:
        """Raise DamagedFile (one line per name) unless every name may be written."""
        problems = [p for p in map(self.problem, names) if p is not None]
        if problems:
            raise DamagedFile("\n".join(problems))

    def write(self, name: str, data: bytes) -> Path:
        """Write one output (checked again, atomically) and record it as the command's own."""
        self.check([name])
        path = self.folder / name
        atomic_write_bytes(path, data)
        manifest = {**self._manifest(), name: hashlib.sha256(data).hexdigest()}
        atomic_write_bytes(self.folder / OUTPUTS_MANIFEST, (json_text(manifest, indent=1) + "\n").encode())
        return path


def _sha256(path: Path) -> str | None:
    try:
        return hashlib.sha256(read_limited(path, 1 << 30)).hexdigest()
    except (OSError, DamagedFile):
        return None
