"""The composition matrix: every client rule with every anchor method and every server algorithm,
as the registry declares them, and the check each case passes (three rounds in-process, twice)."""

from __future__ import annotations

import itertools
import random

import numpy as np
from flwr.app import ArrayRecord

from fedpfn.core.cache import initial_model
from fedpfn.core.protocol import to_numpy
from fedpfn.runtime.algorithms import ANCHOR_METHODS, CLIENT_RULES, build_strategy
from strategies import SERVER_RULES
from tests.support.config import tiny_config
from tests.support.rounds import run_round

RULES = list(CLIENT_RULES)


ANCHORS = ["", *ANCHOR_METHODS]


SERVERS = list(SERVER_RULES)


SERVER_LR = {"fedavgm": 1.0, "fedadam": 0.01, "fedyogi": 0.01, "fedadagrad": 0.01}  # others: Flower's default


def algorithm(rule: str, anchor: str) -> str:
    return f"{anchor}+{rule}" if anchor and rule != "fedavg" else (anchor or rule)


def small(rule: str, anchor: str, server: str, model: str):
    """1000 clients of 60 images, 2 a round, batch 30: two steps a client."""
    extra = {"server_lr": SERVER_LR[server]} if server in SERVER_LR else {}
    return tiny_config(
        algorithm=algorithm(rule, anchor), server=server, model=model, num_clients=1000,
        clients_per_round=2, batch_size=30, **extra,
    )


def three_rounds(cfg) -> dict[str, np.ndarray]:
    model = initial_model(cfg)
    strategy = build_strategy(cfg, model)
    arrays, states = ArrayRecord(model.state_dict()), {}
    for server_round in (1, 2, 3):
        arrays, metrics, _, _ = run_round(cfg, strategy, arrays, server_round, states)
        assert np.isfinite(metrics["train-loss"])
    return to_numpy(arrays)


def check_case(rule: str, anchor: str, server: str, model: str) -> None:
    cfg = small(rule, anchor, server, model)
    start = {k: v.numpy() for k, v in ArrayRecord(initial_model(cfg).state_dict()).items()}
    end = three_rounds(cfg)
    assert list(end) == list(start)
    for name, value in end.items():
        assert value.shape == start[name].shape and value.dtype == start[name].dtype, name
        assert np.isfinite(value).all(), f"{name} is not finite"
        if "running_var" in name:
            assert value.min() >= 0, f"{name} went negative ({value.min()})"
    moved = [n for n in end if "num_batches_tracked" not in n and not np.array_equal(end[n], start[n])]
    assert moved, "nothing trained"
    again = three_rounds(cfg)
    assert all(np.array_equal(again[n], end[n]) for n in end), "not reproducible bit for bit"


MLP_CASES = [c for c in itertools.product(RULES, ANCHORS, SERVERS) if not CLIENT_RULES[c[0]].personal_layers]  # FedBN: BatchNorm


RESNET_CASES = [
    (RULES[i % len(RULES)], anchor, server)
    for i, (anchor, server) in enumerate(itertools.product(ANCHORS, SERVERS))
]


CNN_CASES = random.Random(11).sample(MLP_CASES, 6)
