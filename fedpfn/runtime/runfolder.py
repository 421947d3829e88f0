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
  `--overwrite` replaces only the files listed in `OWN_FILES`.
"""

from __future__ import annotations

import fcntl
import fnmatch
import hashlib
import io
import json
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import torch

from fedpfn.core.files import (
    CHECKPOINT,
    CLIENTS,
    CONFIG,
    LOCK,
    METRICS,
    OWN_FILES,
    PROVENANCE,
    SUMMARY,
    DamagedFile,
    atomic_write_bytes,
    atomic_write_json,
    json_text,
    read_jsonl,
)
from fedpfn.core.settings import ConfigError



class RunFolderError(ConfigError):
    """A run folder that cannot be used as asked; the message says why and what to do."""


def is_own(name: str) -> bool:
    return any(fnmatch.fnmatchcase(name, pattern) for pattern in OWN_FILES)


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


def read_tree(path: Path) -> Any:
    """The tree saved by `tree_bytes`; refuses pickled objects (allow_pickle=False)."""
    with np.load(path, allow_pickle=False) as saved:
        arrays = {name: saved[name] for name in saved.files}
    skeleton = json.loads(arrays.pop("__tree__").tobytes().decode())
    return _unflatten(skeleton, arrays)


class RunFolder:
    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    # --- checks before anything is touched ------------------------------------------------

    def foreign_files(self) -> list[str]:
        if not self.path.is_dir():
            return []
        return sorted(p.name for p in self.path.iterdir() if not is_own(p.name))

    def check_usable(self) -> None:
        """The folder can hold a run: a directory (or creatable), writable, only our files."""
        path = self.path
        if path.exists() and not path.is_dir():
            raise RunFolderError(f"out: '{path}' is a file; give a folder")
        existing = next((p for p in (path, *path.parents) if p.exists()), None)
        if existing is None or not existing.is_dir() or not os.access(existing, os.W_OK | os.X_OK):
            raise RunFolderError(f"out: '{path}' cannot be written (no write permission on '{existing}')")
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

    @contextmanager
    def exclusive(self) -> Iterator[None]:
        """Hold the folder for one process: two runs writing one folder corrupt both."""
        created = not self.path.exists()
        self.path.mkdir(parents=True, exist_ok=True)
        lock = self.path / LOCK
        with open(lock, "w") as fh:
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise RunFolderError(f"out: '{self.path}' is in use by another running process") from None
            try:
                yield
            finally:
                lock.unlink(missing_ok=True)
                if created and not any(self.path.iterdir()):
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
        for entry in self.path.iterdir():
            if not is_own(entry.name) or entry.name == LOCK:
                continue
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)
            else:
                entry.unlink()

    def _config_json(self) -> dict[str, Any]:
        try:
            value = json.loads((self.path / CONFIG).read_text())
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
            raise RunFolderError(f"{self.path / CONFIG} is damaged ({err}); the run cannot be read") from None
        if not isinstance(value, dict):
            raise RunFolderError(f"{self.path / CONFIG} is damaged (not a JSON object)")
        return value

    def remove_temporary(self) -> None:
        """The `*.tmp` files an atomic write left when a kill cut it short (ours by name)."""
        for stale in self.path.glob("*.tmp"):
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
        with open(self.path / name, "a") as fh:
            fh.write(json_text(record) + "\n")
            fh.flush()
            os.fsync(fh.fileno())

    def read_metrics(self) -> list[dict[str, Any]]:
        """Rounds 1..n; a last line cut by a kill is dropped, any other damage refused."""
        rows = self._read_lines(METRICS)
        for expected, row in enumerate(rows, start=1):
            if row.get("round") != expected:
                raise RunFolderError(
                    f"{self.path / METRICS} is damaged: line {expected} holds round {row.get('round')}, "
                    f"expected {expected}"
                )
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
        clients = [row for row in self._read_lines(CLIENTS) if row.get("round", 0) <= last_round]
        self._rewrite(CLIENTS, clients)

    def _rewrite(self, name: str, rows: list[dict[str, Any]]) -> None:
        text = "".join(json_text(r) + "\n" for r in rows)
        atomic_write_bytes(self.path / name, text.encode())

    # --- checkpoints and models ----------------------------------------------------------

    def save_checkpoint(self, fingerprint: dict[str, Any], tree: dict[str, Any]) -> None:
        meta = {"fingerprint": fingerprint, "fingerprint_sha256": fingerprint_hash(fingerprint)}
        atomic_write_bytes(self.path / CHECKPOINT, tree_bytes({"meta": meta, **tree}))

    def load_checkpoint(self, fingerprint: dict[str, Any]) -> dict[str, Any] | None:
        """The checkpoint of the run with these settings, None if there is none; other settings refused."""
        path = self.path / CHECKPOINT
        if not path.exists():
            return None
        try:
            tree = read_tree(path)
            saved = tree.pop("meta")["fingerprint"]
        except (OSError, ValueError, KeyError, TypeError, json.JSONDecodeError, UnicodeDecodeError) as err:
            raise RunFolderError(f"{path} is damaged ({type(err).__name__}); the run cannot be resumed") from None
        if saved != fingerprint:
            keys = sorted(k for k in set(saved) | set(fingerprint) if saved.get(k) != fingerprint.get(k))
            changes = ", ".join(f"{k}: {saved.get(k)} -> {fingerprint.get(k)}" for k in keys[:5])
            raise RunFolderError(
                f"{path} belongs to other settings ({changes}); was config.json edited? it cannot resume this run"
            )
        return tree

    def save_model(self, server_round: int, state_dict: dict[str, torch.Tensor]) -> None:
        buffer = io.BytesIO()
        torch.save(state_dict, buffer)
        atomic_write_bytes(self.path / f"model_round_{server_round}.pt", buffer.getvalue())

    def write_summary(self, summary: dict[str, Any]) -> None:
        atomic_write_json(self.path / SUMMARY, summary)

    def read_summary(self) -> dict[str, Any]:
        return json.loads((self.path / SUMMARY).read_text())

    def checkpoint_round(self) -> int:
        """The round the checkpoint holds (0 without one); reads only its small index."""
        try:
            with np.load(self.path / CHECKPOINT, allow_pickle=False) as saved:
                return int(json.loads(saved["__tree__"].tobytes().decode())["round"])
        except (OSError, KeyError, ValueError):
            return 0

    def stop_message(self) -> str:
        """What a stopped run prints: where it stopped and how it continues."""
        try:
            done = len(self.read_metrics())
        except RunFolderError:
            done = 0
        line = f"stopped after round {done}" if done else "stopped before its first round finished"
        line += f"; continue with: python run_sim.py --resume {self.path}"
        restart = self.checkpoint_round()
        if restart < done:
            line += f" (from its checkpoint of round {restart})" if restart else " (from round 1: no checkpoint yet)"
        return line

    def unfinish(self) -> None:
        """Make a finished run continuable (`--resume DIR --rounds N`): its summary goes."""
        (self.path / SUMMARY).unlink(missing_ok=True)
