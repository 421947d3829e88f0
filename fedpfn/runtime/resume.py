"""What a resume reads back and checks before anything is claimed: the checkpoint, the rows
it covers, and each stateful client's saved state (the server loop restores from it)."""

from __future__ import annotations

from typing import Any

import numpy as np

from clients.state import ClientStateStore
from fedpfn.core import protocol
from fedpfn.core.cache import initial_model
from fedpfn.core.config import RunConfig
from fedpfn.core.files import CHECKPOINT, CLIENT_STATE, METRICS
from fedpfn.runtime.algorithms import state_keys
from fedpfn.runtime.runfolder import RunFolder, RunFolderError


def accepted_rounds(rows: list[dict[str, Any]]) -> dict[int, int]:
    """Partition id -> the last round of `rows` whose reply from it was aggregated.

    A reply that failed, came after the round timeout or belonged to a skipped round was
    not: the server's state (SCAFFOLD's c, FedDyn's h) holds none of it, so the client's
    state must not either, and its next round starts from its state of this round.
    """
    accepted: dict[int, int] = {}
    for row in rows:
        if row["skipped"]:
            continue
        dropped = set(row["failed_partitions"]) | set(row["missing_partitions"])
        accepted.update({pid: row["round"] for pid in row["clients"] if pid not in dropped})
    return accepted


def resume_point(cfg: RunConfig, folder: RunFolder) -> dict[str, Any] | None:
    """The checkpoint a run in `folder` continues from, checked without writing anything.

    None means round 1. Refused: a checkpoint of other settings, or whose model is not the
    run's (names, shapes, dtypes), metrics that do not cover it, a stateful client rule whose
    saved client state is missing or not shaped like the model. Every resume (run_sim.py,
    `--compare`, `flwr run`) comes through here, before anything is claimed or started.
    """
    checkpoint = folder.load_checkpoint(cfg.fingerprint())
    if checkpoint is None:
        return None
    model = {name: value.numpy() for name, value in initial_model(cfg).state_dict().items()}
    check_shaped_like(checkpoint["model"], model, f"{folder.path / CHECKPOINT}'s model", whole=True)
    last = int(checkpoint["round"])
    rows = folder.read_metrics()
    if len(rows) < last:
        raise RunFolderError(
            f"{folder.path / METRICS} holds rounds 1..{len(rows)} but the checkpoint covers 1..{last}; "
            "the run folder is damaged"
        )
    accepted_by_partition = sorted(accepted_rounds(rows[:last]).items())
    for key in state_keys(cfg):
        for pid, accepted in accepted_by_partition:
            saved = ClientStateStore(folder.path, pid).load(key, accepted)
            if saved is None:
                raise RunFolderError(
                    f"{folder.path / CLIENT_STATE} lacks client {pid}'s '{key}' from rounds <= {accepted}; "
                    "the run cannot be resumed with the same numbers"
                )
            check_shaped_like(protocol.to_numpy(saved), model, f"client {pid}'s saved '{key}'")
    return checkpoint


def check_shaped_like(arrays: dict[str, Any], model: dict[str, np.ndarray], what: str, whole: bool = False) -> None:
    """Every array named like a model entry, of its shape and dtype (`whole`: every entry there)."""
    expected = {k: (v.shape, str(v.dtype)) for k, v in model.items()}
    found = {k: (np.shape(v), str(np.asarray(v).dtype)) for k, v in arrays.items()}
    names = set(found) | (set(expected) if whole else set())
    wrong = sorted(k for k in names if expected.get(k) != found.get(k))
    if wrong:
        name = wrong[0]
        raise RunFolderError(
            f"{what} is damaged: its entry '{name}' is {found.get(name, 'missing')}, the run's model has "
            f"{expected.get(name, 'no such entry')}; the run cannot be resumed"
        )
