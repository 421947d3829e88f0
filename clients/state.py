"""A client's state across rounds (SCAFFOLD's c_i, FedDyn's gradient), kept in step with the server's.

A round's new state stands only if the server aggregated that round's reply: SCAFFOLD's
c = mean of the c_i, and FedDyn's h likewise, hold only when both sides drop a reply the
server did not take (a failure, a reply after the round timeout, a skipped round). Each
train message names its client's ACCEPTED_ROUND, and the client continues from its newest
state of a round not after it; the states of later rounds, whose replies were dropped, are
deleted.

Flower's `context.state` lives as long as the process that runs the federation; a run
resumed after `kill -9` starts with empty contexts. So each client also writes its state
per round under `client_state/<partition>/<key>/r<round>.npz`, keeping the versions a
resume may need (a resumed server's accepted rounds are those of its checkpoint). A
deployed node keeps that folder on its own disk instead (node config `state-dir`,
fedpfn.runtime.nodedata.state_root): the run folder is on the SuperLink's host. The
folder's name comes from fedpfn.core.files, which the run folder reads too.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, RecordDict

from fedpfn.core.files import CLIENT_STATE, STATE_ROUND, atomic_write_bytes, state_file
from fedpfn.core.protocol import ACCEPTED_ROUND, to_array_record, to_numpy

if TYPE_CHECKING:
    from fedpfn.core.config import RunConfig

SAVED_IN = "saved-in"  # context.state record: key -> the round its cached record is from


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
        found = (STATE_ROUND.fullmatch(p.name) for p in folder.iterdir())
        return {int(m.group(1)): folder / m.group(0) for m in found if m}

    def load(self, key: str, up_to_round: int) -> ArrayRecord | None:
        """The newest saved record of `key` from a round <= `up_to_round`."""
        versions = self._versions(key)
        rounds = [r for r in versions if r <= up_to_round]
        if not rounds:
            return None
        with np.load(versions[max(rounds)], allow_pickle=False) as saved:
            return to_array_record({name: saved[name] for name in saved.files})

    def save(
        self, key: str, record: ArrayRecord, server_round: int, accepted_round: int, last_checkpoint: int
    ) -> None:
        """Save this round's record; drop the versions whose replies the server did not take
        (rounds after `accepted_round`) and those no resume can need any more.
        """
        folder = self.root / key
        folder.mkdir(parents=True, exist_ok=True)
        buffer = io.BytesIO()
        np.savez(buffer, **to_numpy(record))
        atomic_write_bytes(folder / state_file(server_round), buffer.getvalue())
        versions = self._versions(key)
        for r in [r for r in versions if accepted_round < r < server_round]:
            versions.pop(r).unlink(missing_ok=True)
        needed = max((r for r in versions if r <= last_checkpoint), default=None)
        for r, old in versions.items():
            if r < server_round and r != needed and r <= last_checkpoint:
                old.unlink(missing_ok=True)


class ClientState:
    """One client's records across rounds: Flower's context.state as a cache, the store on disk behind it."""

    def __init__(
        self,
        context_state: RecordDict,
        store: ClientStateStore,
        accepted_round: int | None,
        checkpoint_every: int,
    ) -> None:
        """`accepted_round`: the train message's ACCEPTED_ROUND (None: it named none);
        `checkpoint_every` as in RunConfig: which rounds a resume can restart from.
        """
        self.context_state = context_state
        self.store = store
        self.accepted_round = accepted_round
        self.checkpoint_every = checkpoint_every

    @classmethod
    def of(
        cls,
        cfg: RunConfig,
        partition_id: int,
        context_state: RecordDict,
        accepted_round: int | None,
        state_root: Path | None = None,
    ) -> ClientState:
        """`state_root`: see ClientStateStore (None: the run folder's client_state/)."""
        store = ClientStateStore(cfg.run_dir, partition_id, state_root)
        return cls(context_state, store, accepted_round, cfg.output.checkpoint_every)

    def load(self, key: str) -> ArrayRecord | None:
        """This client's record `key` as of its last accepted round, or None before any.

        The record cached in `context.state` serves unless it is from a later round (its
        reply was dropped) or the process is new (a resume): then it comes from disk.
        """
        accepted = self._accepted(key)
        cached = self.context_state.array_records.get(key)
        saved_in = self.context_state.config_records.get(SAVED_IN, ConfigRecord()).get(key)
        if cached is not None and int(saved_in) <= accepted:
            return cached
        return self.store.load(key, up_to_round=accepted)

    def save(self, key: str, record: ArrayRecord, server_round: int) -> None:
        """Keep `record` for this client's next round, in memory and on disk.

        Without periodic checkpoints only the run's last round is a resume point (to
        extend it), and it needs each client's newest record only.
        """
        self.context_state[key] = record
        self.context_state.setdefault(SAVED_IN, ConfigRecord())[key] = server_round
        every = self.checkpoint_every
        last_checkpoint = (server_round - 1) // every * every if every else server_round - 1
        self.store.save(key, record, server_round, self._accepted(key), last_checkpoint)

    def _accepted(self, key: str) -> int:
        if self.accepted_round is None:
            raise ValueError(
                f"the train message names no '{ACCEPTED_ROUND}': a client that keeps '{key}' "
                "across rounds cannot tell which of its rounds the server took"
            )
        return self.accepted_round
