"""A cohort's clients as one vmapped program (`torch.func.vmap`) over stacked tensors, in chunks.

At step s the clients that still have a batch, grouped by batch size, take one vmapped step;
a client that has run out of batches is never touched again (parameters, optimizer state,
BatchNorm buffers). Nothing is padded, so ragged last batches are exact with BatchNorm. The
numbers differ from `loop` only by the floating-point order of batched kernels.

A round is split into chunks that fit the device's free memory (`fitting_chunk`, the memory
probe); a chunk that runs out of GPU memory is retried in halves, never lost.
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict

import torch
from torch.func import vmap

from fedpfn.core.training import Tally, Tensors, optimizer_state
from fedpfn.runtime.engines.prepared import ClientTrained, PreparedCohort
from fedpfn.runtime.engines.trees import concatenate, stack, tree_map

log = logging.getLogger("fedpfn")
STATE_COPIES = 6  # per parameter a client holds: its parameters, gradient, update, optimizer state, inputs, upload
MEMORY_MARGIN = 0.7  # of the free memory a chunk may plan to use


def train_chunks(cohort: PreparedCohort, size: int) -> tuple[ClientTrained, int]:
    """`train_stacked` over chunks of `size` clients; (the result, the chunk size that fitted).

    A chunk starts from its clients' inputs and keeps nothing until every chunk is done (the
    result saves the state), so a retried chunk gives the numbers it would have.
    """
    parts, start, count = [], 0, len(cohort.clients)
    while start < count:
        members = range(start, min(start + size, count))
        try:
            parts.append(train_stacked(cohort, members))
        except torch.cuda.OutOfMemoryError:
            if size == 1:
                raise MemoryError(
                    f"one client of {cohort.cfg.task.model} (batch {cohort.cfg.local.batch_size}) does not fit in "
                    f"the free memory of {cohort.device}; use a smaller batch size, or --engine ray"
                ) from None
            size = max(1, size // 2)
            torch.cuda.empty_cache()
            log.warning("a chunk of %d clients ran out of GPU memory; continuing with chunks of %d", len(members), size)
            continue
        start = members.stop
    joined = ClientTrained(*(concatenate([getattr(p, f) for p in parts]) for f in ClientTrained.__dataclass_fields__))
    return joined, size


def train_stacked(cohort: PreparedCohort, members: range) -> ClientTrained:
    """Clients `members` as one vmapped program (see the module docstring)."""
    started = time.perf_counter()
    model, ks, count = cohort.round.model, list(members), len(members)
    model.train()
    clients = [cohort.clients[k] for k in ks]
    params, buffers = (stack([cohort.starts[k][i] for k in ks]) for i in (0, 1))
    state = {n: v.unsqueeze(0).repeat(count, *[1] * v.dim()) for n, v in optimizer_state(cohort.spec, cohort.round.start).items()}
    per_client = stack([cohort.per_client[k] for k in ks])
    losses = torch.zeros(count, device=cohort.device, dtype=cohort.dtype)
    correct = torch.zeros(count, device=cohort.device, dtype=torch.int64)
    one_client = cohort.rules.step(model, cohort.spec, batched=True)

    def as_tuple(*args):  # noqa: ANN002, ANN202  (vmap maps tuples, not dataclasses)
        out = one_client(*args)
        return out.params, out.optimizer_state, out.loss, out.correct

    step = vmap(as_tuple, in_dims=(0, 0, 0, 0, 0, 0, None), randomness="error")
    for s in range(max(client.steps for client in clients)):
        groups: dict[int, list[int]] = defaultdict(list)  # batch size -> positions in the chunk
        for j, client in enumerate(clients):
            if s < client.steps:
                groups[len(client.batches[s])].append(j)
        for positions in groups.values():
            inputs, targets = cohort.load(ks[0], torch.stack([clients[j].batches[s] for j in positions]), [ks[j] for j in positions])
            if len(positions) == count:  # every client of the chunk: no gather, buffers update in place
                params, state, loss, hits = step(params, buffers, state, per_client, inputs, targets, s + 1)
                losses += loss
                correct += hits
                continue
            index = torch.tensor(positions, device=cohort.device)
            take = lambda t, index=index: t[index]  # noqa: E731
            sub_buffers = tree_map(buffers, take)
            sub_params, sub_state, sub_per_client = (tree_map(tree, take) for tree in (params, state, per_client))
            new_params, new_state, loss, hits = step(sub_params, sub_buffers, sub_state, sub_per_client, inputs, targets, s + 1)
            if not state and new_state:  # SGD's momentum buffers appear at the first step
                state = {n: v.new_zeros((count, *v.shape[1:])) for n, v in new_state.items()}
            for stacked, new in ((params, new_params), (state, new_state), (buffers, sub_buffers)):
                for name, value in new.items():
                    stacked[name].index_copy_(0, index, value)
            losses.index_add_(0, index, loss)
            correct.index_add_(0, index, hits)
    outputs, uploaded = vmap(cohort.rules.finish)(params, buffers, per_client)
    seconds = (time.perf_counter() - started) / count
    tallies = [Tally(losses[j], correct[j], c.steps, sum(len(b) for b in c.batches)) for j, c in enumerate(clients)]
    accuracy = [
        cohort.local_accuracy(k, ({n: v[j] for n, v in params.items()}, {n: v[j] for n, v in buffers.items()}), model)
        for j, k in enumerate(ks)
    ]
    return ClientTrained(uploaded, buffers, outputs, tallies, [seconds] * count, accuracy)


def fitting_chunk(cohort: PreparedCohort, device: torch.device) -> int:
    """How many clients one vmapped program can hold in the device's free memory.

    One client's activations and gradients are measured on its first batch (the peak of
    one forward and backward); its tensors are counted as STATE_COPIES of its parameters.
    """
    shared = cohort.round
    inputs, _ = cohort.load(0, cohort.clients[0].batches[0])
    torch.cuda.synchronize(device)
    before = torch.cuda.memory_allocated(device)
    torch.cuda.reset_peak_memory_stats(device)
    params = {n: p.detach().clone().requires_grad_(True) for n, p in shared.start.items()}
    buffers: Tensors = {n: b.clone() for n, b in shared.start_buffers.items()}
    out = torch.func.functional_call(shared.model, (params, buffers), (inputs,))
    out.float().sum().backward()
    peak = torch.cuda.max_memory_allocated(device) - before
    param_bytes = sum(p.numel() * p.element_size() for p in shared.start.values())
    del params, buffers, out
    per_client = peak + STATE_COPIES * param_bytes
    free, _ = torch.cuda.mem_get_info(device)
    return max(1, int(MEMORY_MARGIN * free / per_client))
