"""The messages between server and clients: every record and key name, and what both sides need.

Client rules (`clients/`) and server rules (`strategies/`) never import each other; they
meet only in Flower messages, whose names live here. Flower's own strategies use the same
record names by default (`arrays`, `config`, `num-examples`).

A train message, server -> client:
    ARRAYS   the global model: every entry of its state_dict (parameters and buffers)
    CONFIG   SERVER_ROUND, LR, RUN_CONFIG (the run's settings as JSON), ACCEPTED_ROUND (the
             one key that differs between the round's messages), and what server parts add
             (ANCHOR_SEED)
    and one ArrayRecord per server part that sends state (SCAFFOLD_C).
A train reply, client -> server:
    ARRAYS   the trained model; with FedPNU only the entries that trained (see `pack`)
    METRICS  NUM_EXAMPLES, PARTITION_ID, TRAIN_LOSS, TRAIN_ACCURACY, TRAIN_SECONDS, and the
             local-test metrics when a client holds a local test split
    and update records (SCAFFOLD_DELTA): parameter-shaped changes, zero wherever the client
    did not train (anchors), so a receiver may fill entries that were not sent with zeros.
A query message asks a node which partition it holds; its reply carries NODE.
"""

from __future__ import annotations

import numpy as np
from flwr.app import Array, ArrayRecord, RecordDict
from torch import nn

from fedpfn.core.anchors import AnchorMask, AnchorParams, draw_mask

# record names
ARRAYS = "arrays"
CONFIG = "config"
METRICS = "metrics"
NODE = "node"
SCAFFOLD_C = "scaffold-c"  # server -> client: SCAFFOLD's server control variate c
SCAFFOLD_DELTA = "scaffold-delta"  # client -> server: the change of the client's c_i

# CONFIG keys
SERVER_ROUND = "server-round"
LR = "lr"
RUN_CONFIG = "run-config"
# the last round whose reply from this client the server aggregated (0: none): a client's
# state (SCAFFOLD's c_i, FedDyn's gradient) continues from that round's, as the server's does
ACCEPTED_ROUND = "accepted-round"
ANCHOR_SEED = "anchor-seed"

# METRICS keys (and NODE's: the node config keys Flower's simulation sets on every node)
NUM_EXAMPLES = "num-examples"
PARTITION_ID = "partition-id"
NUM_PARTITIONS = "num-partitions"
TRAIN_LOSS = "train-loss"
TRAIN_ACCURACY = "train-accuracy"
TRAIN_SECONDS = "train-seconds"
LOCAL_ACC_BEFORE = "local-accuracy-before"  # the client's local test split, global model
LOCAL_ACC_AFTER = "local-accuracy-after"  # the same split after local training

Arrays = dict[str, np.ndarray]
Mask = dict[str, np.ndarray]  # name -> bool array of the entry's shape; True: not trained


def to_array_record(arrays: Arrays) -> ArrayRecord:
    """Arrays as a record, every shape kept (0-d included) and every dtype kept."""
    return ArrayRecord({name: Array(np.require(value, requirements="C")) for name, value in arrays.items()})


def to_numpy(record: ArrayRecord) -> Arrays:
    return {name: array.numpy() for name, array in record.items()}


def arrays_bytes(content: RecordDict) -> int:
    """Serialized size of every array in a message: what communication accounting counts."""
    return sum(record.count_bytes() for record in content.array_records.values())


def pack(arrays: Arrays, frozen: Mask) -> Arrays:
    """Only the entries that trained, flattened; the receiver knows `frozen` from the seed."""
    return {name: value[~frozen[name]] if name in frozen else value for name, value in arrays.items()}


def unpack(packed: Arrays, frozen: Mask, reference: Arrays | None) -> Arrays:
    """Full arrays from `pack` output; entries not sent come from `reference` (None: zeros)."""
    full = {}
    for name, value in packed.items():
        if name not in frozen:
            full[name] = value
            continue
        shape = frozen[name].shape
        whole = reference[name].copy() if reference is not None else np.zeros(shape, dtype=value.dtype)
        whole[~frozen[name]] = value
        full[name] = whole
    return full


def pack_reply(content: RecordDict, frozen: Mask) -> None:
    """Pack every ArrayRecord of a reply in place (FedPNU's partial upload)."""
    for key, record in list(content.array_records.items()):
        content[key] = to_array_record(pack(to_numpy(record), frozen))


def unpack_reply(content: RecordDict, frozen: Mask, sent: Arrays) -> None:
    """Undo `pack_reply`: the model from what was sent, update records with zeros."""
    for key, record in list(content.array_records.items()):
        reference = sent if key == ARRAYS else None
        content[key] = to_array_record(unpack(to_numpy(record), frozen, reference))


def round_mask(model: nn.Module, params: AnchorParams, seed: int) -> AnchorMask:
    """The anchors of one mask seed: the same on every client and on the server."""
    if params.anchor_granularity is None:
        raise ValueError("anchor_granularity is unresolved; build the config with RunConfig.validated()")
    return draw_mask(
        model,
        params.anchor_ratio,
        seed,
        params.anchor_granularity,
        include_classifier=params.anchor_classifier,
        include_norm=params.anchor_norm,
    )
