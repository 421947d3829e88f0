"""A client's state across rounds (SCAFFOLD's c_i, FedDyn's gradient), kept so a resume continues it.

Flower's `context.state` lives as long as the process that runs the federation; a run
resumed after `kill -9` starts with empty contexts. So each client also writes its state
per round under `client_state/<partition>/<key>/r<round>.npz`, keeping the versions a
resume may need; on resume it reads the newest one not after the checkpoint the run
restarted from. A deployed node keeps that folder on its own disk instead (node config
`state-dir`, fedpfn.nodedata.state_root): the run folder is on the SuperLink's host.
"""

from __future__ import annotations

import io
import re
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from flwr.app import ArrayRecord, RecordDict

from fedpfn.protocol import to_array_record, to_numpy

if TYPE_CHECKING:
    from fedpfn.config import RunConfig
from fedpfn.runfolder import CLIENT_STATE, atomic_write_bytes

_ROUND_FILE = re.compile(r"r(\d+)\.npz$")


class ClientStateStore:
    """The on-disk versions of one client's records."""

    def __init__(self, run_dir: Path, partition_id: int, state_root: Path | None = None) -> None:
        """Under `run_dir`'s client_state/, or under `state_root` where a node keeps its own."""
        root = Path(state_root) if state_root is not None else Path(run_dir) / CLIENT_STATE
        self.root = root / str(partition_id)

    def _versions(self, key: str) -> dict[int, Path]:
        folder = self.root / key
        if not folder.is_dir():
            return {}
        found = (_ROUND_FILE.fullmatch(p.name) for p in folder.iterdir())
        return {int(m.group(1)): folder / m.group(0) for m in found if m}

    def load(self, key: str, up_to_round: int) -> ArrayRecord | None:
        """The newest saved record of `key` from a round <= `up_to_round`."""
        versions = self._versions(key)
        rounds = [r for r in versions if r <= up_to_round]
        if not rounds:
            return None
        with np.load(versions[max(rounds)], allow_pickle=False) as saved:
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


class ClientState:
    """One client's records across rounds: Flower's context.state, backed by disk when checkpointing."""

    def __init__(
        self, context_state: RecordDict, store: ClientStateStore, resumed_from: int, checkpoint_every: int
    ) -> None:
        """`checkpoint_every` as in RunConfig: which rounds a resume can restart from."""
        self.context_state = context_state
        self.store = store
        self.resumed_from = resumed_from
        self.checkpoint_every = checkpoint_every

    @classmethod
    def of(
        cls,
        cfg: RunConfig,
        partition_id: int,
        context_state: RecordDict,
        resumed_from: int,
        state_root: Path | None = None,
    ) -> ClientState:
        """`state_root`: see ClientStateStore (None: the run folder's client_state/)."""
        store = ClientStateStore(cfg.run_dir, partition_id, state_root)
        return cls(context_state, store, resumed_from, cfg.checkpoint_every)

    def load(self, key: str) -> ArrayRecord | None:
        """This client's record `key` from earlier rounds, or None in its first round.

        After a resume the process is new and `context.state` empty: the record then comes
        from disk, as it was at the checkpoint the run resumed from.
        """
        record = self.context_state.array_records.get(key)
        if record is None and self.resumed_from > 0:
            record = self.store.load(key, up_to_round=self.resumed_from)
        return record

    def save(self, key: str, record: ArrayRecord, server_round: int) -> None:
        """Keep `record` for this client's next round, in memory and on disk.

        Without periodic checkpoints only the run's last round is a resume point (to
        extend it), and it needs each client's newest record only.
        """
        self.context_state[key] = record
        every = self.checkpoint_every
        last_checkpoint = (server_round - 1) // every * every if every else server_round - 1
        self.store.save(key, record, server_round, last_checkpoint)
