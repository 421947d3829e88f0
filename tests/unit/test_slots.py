"""Slots (the processes mode's shared rows): a part written at its clients' places in the round
reads back there, bit for bit; a result of another layout or a round past the rows is not
written."""

from __future__ import annotations

import torch

from fedpfn.runtime.engines.result import CohortResult
from fedpfn.runtime.engines.slots import Slots, tensors_of


def result(clients: int, dtype: torch.dtype = torch.float32, seed: int = 0) -> CohortResult:
    g = torch.Generator().manual_seed(seed)
    return CohortResult(
        partition_ids=list(range(clients)),
        entries=["w", "b", "n"],
        params={"w": torch.randn(clients, 3, 2, generator=g, dtype=dtype), "b": torch.randn(clients, 2, generator=g, dtype=dtype)},
        buffers={"n": torch.arange(clients, dtype=torch.int64)},
        records={"delta": {"w": torch.randn(clients, 3, 2, generator=g, dtype=dtype)}},
        metrics=[{"num-examples": 1}] * clients,
        upload_mask=None,
    )


def test_a_part_written_at_its_places_reads_back_in_the_rounds_order():
    slots = Slots.like(result(2), capacity=4, generation=1)
    assert all(t.is_shared() for t in slots.read(4)["params"].values())
    first, second = result(2, seed=1), result(2, seed=2)
    slots.write(first, [3, 0])
    slots.write(second, [1, 2])
    round_ = slots.read(4)
    for k, (part, j) in enumerate([(first, 1), (second, 0), (second, 1), (first, 0)]):
        assert torch.equal(round_["params"]["w"][k], part.params["w"][j])
        assert torch.equal(round_["records"]["delta"]["w"][k], part.records["delta"]["w"][j])
        assert torch.equal(round_["buffers"]["n"][k], part.buffers["n"][j])
    gathered = slots.gather([3, 0])
    assert all(torch.equal(gathered["params"][n], first.params[n]) for n in first.params)
    assert slots.read(3)["params"]["b"].shape == (3, 2)


def test_what_does_not_fit_is_not_written():
    slots = Slots.like(result(2), capacity=4, generation=1)
    assert slots.fits(result(2), [0, 3])
    assert not slots.fits(result(2), [1, 4])  # past the rows
    assert not slots.fits(result(2, dtype=torch.float64), [0, 1])  # another dtype
    wider = result(2)
    wider.params["w"] = torch.zeros(2, 3, 3)
    assert not slots.fits(wider, [0, 1])  # another shape
    fewer = result(2)
    del fewer.records["delta"]
    assert not slots.fits(fewer, [0, 1])  # another entry
    assert set(tensors_of(fewer)) == {"params", "buffers", "records"}
