"""A client's persistent state on disk, so a resumed run continues it.

Flower's `context.state` lives as long as the process that runs the federation; a run
resumed after `kill -9` starts with empty contexts. With checkpoints on, each client also
writes its state per round; on resume it reads the newest one not after the checkpoint.
"""

from __future__ import annotations

import io
import re
from pathlib import Path

import numpy as np
from flwr.app import ArrayRecord

from fedpfn.records import to_array_record, to_numpy
from fedpfn.results import atomic_write_bytes

_ROUND_FILE = re.compile(r"r(\d+)\.npz$")


class ClientStateStore:
    def __init__(self, run_dir: Path, partition_id: int) -> None:
        self.root = Path(run_dir) / "client_state" / str(partition_id)

    def _versions(self, key: str) -> dict[int, Path]:
        folder = self.root / key
        if not folder.is_dir():
            return {}
        found = (_ROUND_FILE.search(p.name) for p in folder.iterdir())
        return {int(m.group(1)): folder / m.group(0) for m in found if m}

    def load(self, key: str, up_to_round: int) -> ArrayRecord | None:
        """The newest saved record of `key` from a round <= `up_to_round`."""
        rounds = [r for r in self._versions(key) if r <= up_to_round]
        if not rounds:
            return None
        with np.load(self._versions(key)[max(rounds)]) as saved:
            return to_array_record({name: saved[name] for name in saved.files})

    def save(self, key: str, record: ArrayRecord, server_round: int, last_checkpoint: int) -> None:
        """Save this round's record; drop versions no resume can need any more."""
        folder = self.root / key
        folder.mkdir(parents=True, exist_ok=True)
        buffer = io.BytesIO()
        np.savez(buffer, **to_numpy(record))
        atomic_write_bytes(folder / f"r{server_round}.npz", buffer.getvalue())
        versions = self._versions(key)
        needed = max((r for r in versions if r <= last_checkpoint), default=None)
        for r, old in versions.items():
            if r < server_round and r != needed and r <= last_checkpoint:
                old.unlink(missing_ok=True)
