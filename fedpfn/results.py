"""A run is a folder: resolved config, metrics per round, summary, plots, checkpoints.

`metrics.jsonl` is appended and flushed round by round, so a killed run keeps every
finished round; `summary.json` is written last (atomically), so its presence is what
marks a run as finished.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch

from fedpfn.config import ConfigError, RunConfig

CONFIG = "config.json"
METRICS = "metrics.jsonl"
SUMMARY = "summary.json"
CHECKPOINT = "checkpoint.pt"


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write then rename, so a reader never sees half a file (even after kill -9)."""
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def atomic_write_json(path: Path, value: Any) -> None:
    atomic_write_bytes(path, (json.dumps(value, indent=2, sort_keys=True) + "\n").encode())


def atomic_torch_save(path: Path, value: Any) -> None:
    tmp = path.with_name(path.name + ".tmp")
    torch.save(value, tmp)
    with open(tmp, "rb") as fh:
        os.fsync(fh.fileno())
    os.replace(tmp, path)


class RunFolder:
    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    # --- lifecycle -----------------------------------------------------------------------

    @contextmanager
    def exclusive(self) -> Iterator[None]:
        """Hold the folder for one process: two runs writing one folder corrupt both.

        The lock file sits beside the folder, since starting over removes the folder.
        """
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path.parent / f".{self.path.name}.lock", "w") as fh:
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise ConfigError(f"out: '{self.path}' is in use by another running process") from None
            yield

    def holds_run(self) -> bool:
        return (self.path / CONFIG).exists()

    def is_finished(self) -> bool:
        return (self.path / SUMMARY).exists()

    def start(self, cfg: RunConfig, overwrite: bool) -> None:
        """Claim the folder for a new run; never silently replace an earlier one."""
        if self.holds_run():
            if not overwrite:
                raise ConfigError(
                    f"out: '{self.path}' already holds a run; pass --overwrite to replace it "
                    "or --resume to continue it"
                )
            shutil.rmtree(self.path)
        self.path.mkdir(parents=True, exist_ok=True)
        atomic_write_json(self.path / CONFIG, cfg.to_dict())

    def load_config(self) -> RunConfig:
        return RunConfig.from_dict(json.loads((self.path / CONFIG).read_text()))

    # --- metrics -------------------------------------------------------------------------

    def append_metrics(self, record: dict[str, Any]) -> None:
        with open(self.path / METRICS, "a") as fh:
            fh.write(json.dumps(record, sort_keys=True) + "\n")
            fh.flush()
            os.fsync(fh.fileno())

    def read_metrics(self) -> list[dict[str, Any]]:
        path = self.path / METRICS
        if not path.exists():
            return []
        rows = []
        for line in path.read_text().splitlines():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:  # a line cut by a kill: that round did not finish
                break
        return rows

    def keep_metrics_up_to(self, last_round: int) -> None:
        """Drop rounds after `last_round` (finished after the checkpoint a resume starts from)."""
        rows = [r for r in self.read_metrics() if r["round"] <= last_round]
        text = "".join(json.dumps(r, sort_keys=True) + "\n" for r in rows)
        atomic_write_bytes(self.path / METRICS, text.encode())

    # --- artefacts -----------------------------------------------------------------------

    def save_model(self, server_round: int, state_dict: dict[str, torch.Tensor]) -> None:
        atomic_torch_save(self.path / f"model_round_{server_round}.pt", state_dict)

    def save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        atomic_torch_save(self.path / CHECKPOINT, checkpoint)

    def load_checkpoint(self) -> dict[str, Any] | None:
        path = self.path / CHECKPOINT
        return torch.load(path, weights_only=False) if path.exists() else None

    def write_summary(self, summary: dict[str, Any]) -> None:
        atomic_write_json(self.path / SUMMARY, summary)

    def read_summary(self) -> dict[str, Any]:
        return json.loads((self.path / SUMMARY).read_text())
