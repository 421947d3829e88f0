"""A cohort's clients one at a time, each unvmapped: `loop` (one after another, the ClientApp's
way) and `threads` (several at once, one torch thread each: the CPU, where convolutions under
vmap become slow grouped convolutions). Both give the same numbers bit for bit: each client
is the same single-threaded computation.
"""

from __future__ import annotations

import copy
import time
from concurrent.futures import ThreadPoolExecutor
from queue import Queue

import torch
from torch import nn

from fedpfn.core.training import Tally, Tensors, optimizer_state, run_steps, torch_threads
from fedpfn.runtime.engines.prepared import ClientTrained, PreparedCohort
from fedpfn.runtime.engines.trees import stack


def train_loop(cohort: PreparedCohort, threads: int) -> ClientTrained:
    """Every client one after another on `threads` torch threads (the ClientApp's `client_cpus`)."""
    with torch_threads(threads):
        return _stacked([train_one(cohort, k, cohort.round.model) for k in range(len(cohort.clients))])


def train_threads(cohort: PreparedCohort, threads: int) -> ClientTrained:
    """`train_one` for every client on `threads` threads, one torch thread each.

    A functional call swaps a module's tensors while it runs, so each thread takes a model
    copy of its own from the pool for the client it trains.
    """
    copies: Queue[nn.Module] = Queue()
    for _ in range(min(threads, len(cohort.clients))):
        copies.put(copy.deepcopy(cohort.round.model))

    def train(k: int) -> ClientTrained:
        model = copies.get()
        try:
            return train_one(cohort, k, model)
        finally:
            copies.put(model)

    with torch_threads(1), ThreadPoolExecutor(copies.qsize()) as pool:
        return _stacked(list(pool.map(train, range(len(cohort.clients)))))


def train_one(cohort: PreparedCohort, k: int, model: nn.Module) -> ClientTrained:
    """Client k alone, through the one loop around the one step; unstacked."""
    started = time.perf_counter()
    per_client = cohort.per_client[k]
    model.train()
    params = dict(cohort.starts[k][0])
    buffers = {name: value.clone() for name, value in cohort.starts[k][1].items()}
    one_client = cohort.rules.step(model, cohort.spec)

    def step(p: Tensors, state: Tensors, inputs: torch.Tensor, targets: torch.Tensor, number: int):  # noqa: ANN202
        return one_client(p, buffers, state, per_client, inputs, targets, number)

    tally = Tally.zeros(cohort.device, cohort.dtype)
    load = lambda batch: cohort.load(k, batch)  # noqa: E731
    params, _ = run_steps(step, params, optimizer_state(cohort.spec, params), cohort.clients[k].batches, load, tally)
    outputs, uploaded = cohort.rules.finish(params, buffers, per_client)
    accuracy = cohort.local_accuracy(k, (params, buffers), model)
    return ClientTrained(uploaded, buffers, outputs, [tally], [time.perf_counter() - started], [accuracy])


def _stacked(done: list[ClientTrained]) -> ClientTrained:
    """Single clients' results as one, their tensors stacked (client first)."""
    return ClientTrained(
        stack([d.params for d in done]),
        stack([d.buffers for d in done]),
        stack([d.outputs for d in done]),
        [t for d in done for t in d.tallies],
        [s for d in done for s in d.seconds],
        [a for d in done for a in d.local_accuracy],
    )
