"""The names of a run folder's files and how they are written, for every part that reads or writes one.

The run folder itself (checks, lock, checkpoints, resume) is `fedpfn.runtime.runfolder`; the
clients' state files (clients/state.py), the reports (fedpfn.analysis) and the scripts take
the names from here, so a name is written once.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
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
# every name the tool writes in a run folder; nothing else is ever replaced or removed
OWN_FILES = (
    CONFIG, METRICS, CLIENTS, SUMMARY, CHECKPOINT, CLIENT_STATE, LOG, LOCK,
    "partition.json", "partition.png", "accuracy.png", "clients.png", "model_round_*.pt",
    "tensorboard", "wandb", "*.tmp",
)  # fmt: skip


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write then rename, so a reader never sees half a file (even after kill -9)."""
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


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


class DamagedFile(ValueError):
    """A run-folder file that cannot be read as what it should be; the message says where."""


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """The complete lines of a JSON-lines file as objects ([] when it does not exist).

    The text after the last newline is a line cut by a kill (that round never finished)
    and is left out; any other line that is not a JSON object raises DamagedFile.
    """
    if not path.exists():
        return []
    try:
        complete = path.read_text(errors="replace").split("\n")[:-1]
    except OSError as err:
        raise DamagedFile(f"cannot read {path} ({err.strerror})") from None
    rows = []
    for number, line in enumerate(complete, start=1):
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            row = None
        if not isinstance(row, dict):
            raise DamagedFile(f"{path} is damaged at line {number}")
        rows.append(row)
    return rows
