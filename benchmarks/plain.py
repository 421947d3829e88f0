"""The baseline: the simulator's FedAvg work as a plain sequential PyTorch loop in one process.

Same work as a FedAvg run of the same config: the clients of each round from
`strategies.sample_clients`, each client's indices from `fedpfn.core.cache.client_indices`, the
initial model from `initial_model`, the batch order from the client's seeded DATA_ORDER
stream, a textbook torch.optim loop, FedAvg weighted by examples, and the evaluation
of the global model the server does every round. What is left out is exactly what the
simulator adds: Flower's messages, Ray's actors and the run folder.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import report  # noqa: F401  (puts the repository root on sys.path)
import torch

from fedpfn.core.config import RunConfig

State = dict[str, torch.Tensor]


@dataclass(frozen=True)
class PlainRound:
    round: int
    seconds: float  # the whole round: every client, the average, the evaluation
    evaluate: float
    clients: dict[int, float]  # partition id -> seconds of its local training
    accuracy: float


@contextmanager
def torch_threads(threads: int | None) -> Iterator[None]:
    """torch's intra-op threads set for the block (None: left as they are)."""
    previous = torch.get_num_threads()
    if threads:
        torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


def _sync(device: torch.device) -> None:
    """Wait for the GPU, so the clock reads finished work."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def train_client(
    cfg: RunConfig, state: State, server_round: int, pid: int, device: torch.device, mask: State | None = None
) -> State:
    """One client's local round from the global `state`: a textbook PyTorch loop (module,
    loss.backward(), torch.optim) over the client's batches in the simulator's order; with
    `mask` (FedPFN's work) the masked entries are put back to `state`'s after every step."""
    from fedpfn.core.cache import client_indices, dataset_on, model_skeleton
    from fedpfn.core.seeding import Stream, torch_generator
    from fedpfn.core.training import minibatches

    data = dataset_on(cfg, device)
    model = model_skeleton(cfg, device)
    model.load_state_dict(state)
    model.train()
    lr = cfg.lr_at(server_round)
    if cfg.local.optimizer == "adam":
        optimizer: torch.optim.Optimizer = torch.optim.Adam(model.parameters(), lr=lr, weight_decay=cfg.local.weight_decay)
    else:
        optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=cfg.local.momentum, weight_decay=cfg.local.weight_decay)
    order = torch_generator(cfg.seed, Stream.DATA_ORDER, server_round, pid)
    anchored = [(p, mask[n].to(device), state[n]) for n, p in model.named_parameters() if mask and n in mask]
    for batch in minibatches(client_indices(cfg)[pid], cfg.local.batch_size, cfg.local.local_epochs, order):
        batch = batch.to(data.train_x.device)
        optimizer.zero_grad(set_to_none=True)
        torch.nn.functional.cross_entropy(model(data.train_x[batch]), data.train_y[batch]).backward()
        optimizer.step()
        with torch.no_grad():
            for param, is_anchor, anchor in anchored:
                param.copy_(torch.where(is_anchor, anchor, param))
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def fedavg(results: list[tuple[int, State]]) -> State:
    """The average of the clients' states weighted by their examples (in float64)."""
    total = sum(n for n, _ in results)
    first = results[0][1]
    return {k: (sum(n * s[k].double() for n, s in results) / total).to(first[k].dtype) for k in first}


def plain_fedavg(
    cfg: RunConfig, device: torch.device, threads: int | None = None, anchors: float = 0.0, evaluate_rounds: bool = True
) -> list[PlainRound]:
    """`cfg.rounds` FedAvg rounds as a bare loop on `device`; one PlainRound per round.

    `anchors`: FedPFN's work, a weight-level mask of this ratio drawn each round (0: FedAvg).
    `evaluate_rounds` False: no round evaluates the global model (accuracy NaN, `evaluate` 0).
    """
    from fedpfn.core.anchors import draw_mask
    from fedpfn.core.cache import client_indices, dataset_on, initial_model
    from fedpfn.core.seeding import Stream, seed_for
    from fedpfn.core.training import evaluate
    from strategies import sample_clients

    with torch_threads(threads):
        data, parts = dataset_on(cfg, device), client_indices(cfg)
        global_model = initial_model(cfg).to(device)
        state = {k: v.detach().clone() for k, v in global_model.state_dict().items()}
        rows = []
        for server_round in range(1, cfg.federation.rounds + 1):
            start = time.perf_counter()
            seconds: dict[int, float] = {}
            results = []
            seed = seed_for(cfg.seed, Stream.MASK, server_round)
            mask = draw_mask(global_model, anchors, seed, "weight") if anchors else None
            for pid in sample_clients(cfg.seed, server_round, cfg.federation.num_clients, cfg.federation.clients_per_round):
                began = time.perf_counter()
                results.append((len(parts[pid]), train_client(cfg, state, server_round, pid, device, mask)))
                _sync(device)
                seconds[pid] = time.perf_counter() - began
            state = fedavg(results)
            began = time.perf_counter()
            global_model.load_state_dict(state)
            _, accuracy = evaluate(global_model, data.test_x, data.test_y) if evaluate_rounds else (0.0, float("nan"))
            end = time.perf_counter()
            rows.append(PlainRound(server_round, end - start, end - began, seconds, accuracy))
        return rows


def main(argv: list[str]) -> None:
    """`python benchmarks/plain.py THREADS ANCHORS FLAG VALUE ...`: a plain loop of run_sim.py's
    flags in a process of its own (bench_engines runs two side by side), no round evaluated; the
    seconds of its rounds printed as one JSON list."""
    import json

    from fedpfn.runtime.algorithms import load_config

    threads, anchors, flags = int(argv[0]), float(argv[1]), argv[2:]
    cfg = load_config({key.removeprefix("--"): value for key, value in zip(flags[::2], flags[1::2])})
    rows = plain_fedavg(cfg, torch.device("cpu"), threads=threads, anchors=anchors, evaluate_rounds=False)
    print(json.dumps([row.seconds for row in rows]))


if __name__ == "__main__":
    import sys

    main(sys.argv[1:])
