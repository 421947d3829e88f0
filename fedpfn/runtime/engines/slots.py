"""Shared memory between the processes mode's driver and workers: rows for a round's results,
which the workers write and the driver reads where they were written; and the round's model,
which the driver writes once and every worker reads.

Why: sent back as tensors, a worker's part of a round goes into shared memory made for it
(a segment per tensor, its descriptor passed over a socket) and the driver then copies every
part into the round's order: on the CPU, for 100 small clients a round, more time than the
aggregation. Slots are made once (after the first round, shaped like its result) and kept for
the run: each client's tensors are written once, into the row of its place in the round, in
memory every process already holds, and the driver's stacks are views of the rows.

A round's views are valid until the next round is sent: the server makes the round's totals
and replies from them before (replies copy their arrays), and nothing keeps them after.

The round's model, sent in the message, would be pickled into every worker's pipe and decoded
by each (np.load parses every array's header): written once into shared tensors instead, each
worker copies it out (SharedModel).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import torch

from fedpfn.core.protocol import Arrays
from fedpfn.core.training import Tensors, torch_threads
from fedpfn.runtime.engines.result import CohortResult
from fedpfn.runtime.engines.trees import tree_map

Layout = Any  # a pytree of (row shape, dtype): what a result's tensors look like, client dimension left out


def tensors_of(result: CohortResult) -> dict[str, Any]:
    """The result's stacked tensors as one pytree."""
    return {"params": result.params, "buffers": result.buffers, "records": result.records}


def layout_of(tree: Any) -> Layout:
    return tree_map(tree, lambda t: (tuple(t.shape[1:]), t.dtype))


@dataclass
class Slots:
    """`capacity` rows (clients) of shared memory for each tensor of a round's result."""

    rows: dict[str, Any]  # tensors_of's tree, each tensor (capacity, *row shape), in shared memory
    capacity: int
    generation: int  # which slots a worker holds: new slots are sent to it once

    @classmethod
    def like(cls, result: CohortResult, capacity: int, generation: int) -> Slots:
        """Slots shaped like `result`'s tensors, for rounds of up to `capacity` clients."""
        made = tree_map(tensors_of(result), lambda t: t.new_empty((capacity, *t.shape[1:])).share_memory_())
        return cls(made, capacity, generation)

    def fits(self, result: CohortResult, positions: Sequence[int]) -> bool:
        """Whether `result`'s clients can be written at `positions`: the same entries, shapes and
        dtypes, and rows enough."""
        return max(positions) < self.capacity and layout_of(tensors_of(result)) == layout_of(self.rows)

    def write(self, result: CohortResult, positions: Sequence[int]) -> None:
        """`result`'s clients into the rows `positions` (a copy: one thread, the same bits)."""
        index = torch.tensor(list(positions), dtype=torch.long)
        with torch_threads(1):
            for rows, part in _pairs(self.rows, tensors_of(result)):
                rows.index_copy_(0, index, part)

    def read(self, count: int) -> dict[str, Any]:
        """The first `count` rows of every tensor: a round of `count` clients, in its order (views)."""
        return tree_map(self.rows, lambda t: t[:count])

    def gather(self, positions: Sequence[int]) -> dict[str, Any]:
        """The rows `positions`, copied: a part written into the slots, as its own tensors."""
        index = torch.tensor(list(positions), dtype=torch.long)
        return tree_map(self.rows, lambda t: t.index_select(0, index))


@dataclass
class SharedModel:
    """A model's entries in shared memory: the driver writes each round's, workers copy it out."""

    tensors: Tensors  # name -> tensor, in the message's order
    layout: dict[str, tuple[tuple[int, ...], np.dtype]]  # name -> the shape and numpy dtype it holds
    generation: int  # which model a worker holds: new shared tensors are sent to it once

    @classmethod
    def like(cls, arrays: Arrays, generation: int) -> SharedModel | None:
        """Shared tensors shaped like `arrays`; None where one has no torch dtype (big-endian)."""
        try:
            made = {name: torch.from_numpy(value).clone().share_memory_() for name, value in arrays.items()}
        except (TypeError, ValueError):
            return None
        return cls(made, _layout(arrays), generation)

    def fits(self, arrays: Arrays) -> bool:
        """Whether `arrays` have these entries, in this order, of these shapes and dtypes."""
        return list(arrays) == list(self.layout) and _layout(arrays) == self.layout

    def write(self, arrays: Arrays) -> None:
        with torch_threads(1):
            for name, value in arrays.items():
                self.tensors[name].copy_(torch.from_numpy(value))

    def read(self) -> Tensors:
        """The model as tensors of this process's own (the next round's model goes where these were)."""
        return {name: t.clone() for name, t in self.tensors.items()}


def _layout(arrays: Arrays) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
    return {name: (value.shape, value.dtype) for name, value in arrays.items()}


def with_tensors(result: CohortResult, tree: dict[str, Any]) -> CohortResult:
    """`result` holding `tree`'s tensors (tensors_of's shape)."""
    return replace(result, params=tree["params"], buffers=tree["buffers"], records=tree["records"])


def _pairs(a: Any, b: Any) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """The tensors of two pytrees of one layout, paired by their keys."""
    if isinstance(a, dict):
        return [pair for key in a for pair in _pairs(a[key], b[key])]
    return [(a, b)]
