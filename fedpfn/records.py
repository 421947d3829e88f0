"""Conversions between Flower records and numpy, and the byte count of what is sent."""

from __future__ import annotations

import numpy as np
from flwr.app import Array, ArrayRecord, RecordDict


def to_array_record(arrays: dict[str, np.ndarray]) -> ArrayRecord:
    return ArrayRecord({name: Array(np.ascontiguousarray(value)) for name, value in arrays.items()})


def to_numpy(record: ArrayRecord) -> dict[str, np.ndarray]:
    return {name: array.numpy() for name, array in record.items()}


def arrays_bytes(content: RecordDict) -> int:
    """Serialized size of every array in a message: what communication accounting counts."""
    return sum(record.count_bytes() for record in content.array_records.values())
