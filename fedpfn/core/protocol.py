"""The envelope of every message between server and clients: record names, common keys, arrays.

An algorithm's own keys live with it (`clients/scaffold.py` names SCAFFOLD's records, and
its server side reads them from there); this module holds what every message carries.
Flower's own strategies use the same record names by default (`arrays`, `config`,
`num-examples`).

A train message, server -> client:
    ARRAYS   the global model: every entry of its state_dict (parameters and buffers)
    CONFIG   SERVER_ROUND, LR, RUN_CONFIG (the run's settings as JSON), ACCEPTED_ROUND (the
             one key that differs between the round's messages), and the entries server
             parts add (FedPFN's anchor seed)
    and one ArrayRecord per server part that sends state (SCAFFOLD's c).
A train reply, client -> server:
    ARRAYS   the trained model (FedPNU: only the entries that trained)
    METRICS  NUM_EXAMPLES, PARTITION_ID, TRAIN_LOSS, TRAIN_ACCURACY, TRAIN_SECONDS, the
             local-test metrics when a client holds a local test split, and the rule's own
    and update records (SCAFFOLD's delta): parameter-shaped changes, zero wherever the
    client did not train (anchors), so a receiver may fill entries not sent with zeros.
    A reply that stands for its client's part in a round total computed where the clients
    trained (the batched engine, in a round whose models the server does not read: the
    `need_models` argument of fedpfn.runtime.transport.TrainGrid) carries METRICS and UPLOAD
    instead of arrays.
A query message asks a node which partition it holds; its reply carries NODE.
"""

from __future__ import annotations

import weakref

import numpy as np
from flwr.app import Array, ArrayRecord, RecordDict

# record names
ARRAYS = "arrays"
CONFIG = "config"
METRICS = "metrics"
NODE = "node"
UPLOAD = "upload"  # a reply without arrays: {UPLOAD_BYTES: what its arrays would have taken}

# CONFIG keys
SERVER_ROUND = "server-round"
LR = "lr"
RUN_CONFIG = "run-config"
# the last round whose reply from this client the server aggregated (0: none): a client's
# state (SCAFFOLD's c_i, FedDyn's gradient) continues from that round's, as the server's does
ACCEPTED_ROUND = "accepted-round"
UPLOAD_BYTES = "bytes"  # UPLOAD's key

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


def to_array_record(arrays: Arrays, keep_decoded: bool = False) -> ArrayRecord:
    """Arrays as a record, every shape kept (0-d included) and every dtype kept. `keep_decoded`:
    the record also keeps a copy of the arrays, which to_numpy reads instead of decoding them
    (the global model, decoded several times a round; twice the memory while it lives)."""
    record = ArrayRecord({name: Array(np.require(value, requirements="C")) for name, value in arrays.items()})
    if keep_decoded:
        for name, array in record.items():
            _remember(array, arrays[name])
    return record


def to_numpy(record: ArrayRecord) -> Arrays:
    """The record's arrays, each a copy of its own (the caller may change it)."""
    return {name: _decoded(array) for name, array in record.items()}


# Why: the server decodes the global model it has just encoded several times a round (the
# strategy, the grid, the checkpoint, the processes mode's shared model), and np.load parses
# every array's header in Python, about 0.1 ms an array. An array made with `keep_decoded` keeps
# a copy of what it holds, read back instead while its bytes are the ones it was made with; the
# copy goes with the array.
_DECODED: dict[int, tuple[bytes, np.ndarray]] = {}  # id(Array) -> (its data, what it decodes to)


def _remember(array: Array, value: np.ndarray) -> None:
    key = id(array)
    _DECODED[key] = (array.data, np.array(value, copy=True, order="C"))
    weakref.finalize(array, _DECODED.pop, key, None)


def _decoded(array: Array) -> np.ndarray:
    known = _DECODED.get(id(array))
    if known is not None and known[0] is array.data:
        return known[1].copy()
    return array.numpy()


def arrays_bytes(content: RecordDict) -> int:
    """Serialized size of every array in a message: what communication accounting counts."""
    if UPLOAD in content:  # indexed, not through config_records: a view built anew on every call
        return int(content[UPLOAD][UPLOAD_BYTES])
    return sum(record.count_bytes() for record in content.array_records.values())


def pack(arrays: Arrays, left_out: Arrays) -> Arrays:
    """Only the entries that are sent, flattened; the receiver knows `left_out` from the seed."""
    return {name: value[~left_out[name]] if name in left_out else value for name, value in arrays.items()}


def unpack(packed: Arrays, left_out: Arrays, reference: Arrays | None) -> Arrays:
    """Full arrays from `pack` output; entries not sent come from `reference` (None: zeros)."""
    full = {}
    for name, value in packed.items():
        if name not in left_out:
            full[name] = value
            continue
        whole = reference[name].copy() if reference is not None else np.zeros(left_out[name].shape, dtype=value.dtype)
        whole[~left_out[name]] = value
        full[name] = whole
    return full


def pack_reply(content: RecordDict, left_out: Arrays) -> None:
    """Pack every ArrayRecord of a reply in place (FedPNU's partial upload, personal entries)."""
    for key, record in list(content.array_records.items()):
        content[key] = to_array_record(pack(to_numpy(record), left_out))
