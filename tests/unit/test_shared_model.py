"""The processes mode's shared model (engines/slots.py): what a worker reads is the round's
model, bit for bit, in tensors of its own; a model of another layout is not written over the
shared one; arrays torch cannot hold are left to the message."""

from __future__ import annotations

import numpy as np
import torch

from fedpfn.runtime.engines.slots import SharedModel


def model(seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {"w": rng.standard_normal((4, 3)).astype(np.float32), "count": np.array(seed, dtype=np.int64)}


def test_a_worker_reads_the_model_written_in_tensors_of_its_own():
    shared = SharedModel.like(model(0), generation=1)
    assert shared is not None and shared.tensors["w"].is_shared()
    shared.write(model(1))
    read = shared.read()
    for name, value in model(1).items():
        assert read[name].numpy().tobytes() == value.tobytes() and read[name].dtype == torch.from_numpy(value).dtype
    read["w"][0, 0] = 99.0  # a worker's own copy: the shared model unchanged
    assert shared.tensors["w"][0, 0] != 99.0
    shared.write(model(2))  # the next round's model leaves what a worker read as it was
    assert read["count"].item() == 1


def test_another_layout_does_not_fit():
    shared = SharedModel.like(model(0), generation=1)
    assert shared.fits(model(5))
    assert not shared.fits({**model(0), "w": np.zeros((4, 4), dtype=np.float32)})  # shape
    assert not shared.fits({**model(0), "w": np.zeros((4, 3), dtype=np.float64)})  # dtype
    assert not shared.fits({"count": model(0)["count"], "w": model(0)["w"]})  # order
    assert not shared.fits({"w": model(0)["w"]})  # entries


def test_arrays_torch_cannot_hold_stay_in_the_message():
    assert SharedModel.like({"w": np.arange(3, dtype=">i4")}, generation=1) is None
