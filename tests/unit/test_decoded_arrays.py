"""protocol.to_numpy reads back what protocol.to_array_record encoded with `keep_decoded` without
parsing it again: the same arrays as Flower's own decoding, bit for bit, each caller given a copy
of its own; records made without it keep nothing."""

from __future__ import annotations

import numpy as np
from flwr.app import Array, ArrayRecord

from fedpfn.core import protocol
from fedpfn.core.protocol import to_array_record, to_numpy

KINDS = {
    "weight": np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32),
    "scalar": np.array(7, dtype=np.int64),
    "fortran": np.asfortranarray(np.random.default_rng(1).standard_normal((3, 2))),
    "big_endian": np.arange(4, dtype=">i4"),
    "nan": np.array([np.nan, -0.0, np.inf], dtype=np.float16),
}


def flowers(record: ArrayRecord) -> dict[str, np.ndarray]:
    return {name: array.numpy() for name, array in record.items()}


def test_read_back_as_flower_decodes_it() -> None:
    record = to_array_record(KINDS, keep_decoded=True)
    ours, theirs = to_numpy(record), flowers(record)
    for name in KINDS:
        assert ours[name].dtype == theirs[name].dtype, name
        assert ours[name].shape == theirs[name].shape, name
        assert ours[name].tobytes() == theirs[name].tobytes(), name
        assert ours[name].flags.c_contiguous, name


def test_the_record_holds_what_it_was_made_with() -> None:
    arrays = {"w": np.zeros((2, 2), dtype=np.float32)}
    record = to_array_record(arrays, keep_decoded=True)
    arrays["w"][0, 0] = 5.0  # the caller's array changed after the record was made
    assert to_numpy(record)["w"][0, 0] == 0.0
    assert flowers(record)["w"][0, 0] == 0.0


def test_each_caller_gets_its_own_copy() -> None:
    record = to_array_record({"w": np.ones(3, dtype=np.float32)}, keep_decoded=True)
    first = to_numpy(record)
    first["w"][:] = -1.0
    assert (to_numpy(record)["w"] == 1.0).all()


def test_an_array_given_other_bytes_is_decoded_from_them() -> None:
    record = to_array_record({"w": np.ones(3, dtype=np.float32)}, keep_decoded=True)
    record["w"].data = Array(np.full(3, 2.0, dtype=np.float32)).data
    assert (to_numpy(record)["w"] == 2.0).all()


def test_records_made_elsewhere_are_decoded() -> None:
    record = ArrayRecord({"w": Array(np.arange(5, dtype=np.int32))})
    assert to_numpy(record)["w"].tolist() == [0, 1, 2, 3, 4]


def test_only_records_asked_to_keep_a_copy_do():
    kept, plain = to_array_record(KINDS, keep_decoded=True), to_array_record(KINDS)
    assert all(id(array) in protocol._DECODED for array in kept.values())
    assert not any(id(array) in protocol._DECODED for array in plain.values())
    assert to_numpy(plain)["weight"].tobytes() == KINDS["weight"].tobytes()
