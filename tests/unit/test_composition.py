"""Every client rule with every anchor method and every server algorithm, on every model family.

Three rounds through the real strategies, clients and Flower messages (conftest's in-process
round): finite outputs, the exact shapes and dtypes sent (0-d counters included), BatchNorm
running variances never negative, and the same numbers bit for bit on a second run. The
matrix is the registry's (a new client rule or server algorithm joins it by registering):
the MLP runs all of it; ResNet-20 (BatchNorm) runs every server with every anchor method,
the client rule cycling; the CNN runs a seeded sample.
"""

from __future__ import annotations

import itertools
import random

import numpy as np
import pytest
from flwr.app import ArrayRecord

from fedpfn.core.cache import initial_model
from fedpfn.core.protocol import to_numpy
from fedpfn.runtime.algorithms import ANCHOR_METHODS, CLIENT_RULES, build_strategy
from strategies import SERVER_RULES
from tests.support.config import tiny_config
from tests.support.rounds import client_replies, first_fast, run_round

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


@pytest.mark.parametrize("rule,anchor,server", MLP_CASES, ids=["-".join(c) for c in MLP_CASES])
def test_mlp_matrix(rule, anchor, server):
    check_case(rule, anchor, server, "mlp")


@pytest.mark.parametrize("rule,anchor,server", first_fast(RESNET_CASES), ids=["-".join(c) for c in RESNET_CASES])
def test_resnet20_every_server_and_anchor(rule, anchor, server):
    check_case(rule, anchor, server, "resnet20")


@pytest.mark.parametrize("rule,anchor,server", CNN_CASES, ids=["-".join(c) for c in CNN_CASES])
def test_cnn_sample(rule, anchor, server):
    check_case(rule, anchor, server, "cnn")


def one_round_by_hand(cfg, strategy, arrays, server_round, states):
    """A round whose replies are also kept as they were before aggregation (full arrays, weights)."""
    replies = client_replies(cfg, strategy, arrays, server_round, states)
    before = [(to_numpy(r.content["arrays"]), float(r.content["metrics"]["num-examples"])) for r in replies]
    new, _ = strategy.aggregate_train(server_round, replies)
    return new, before


def test_buffers_are_example_weighted_means_never_a_server_step():
    """Under FedAdam the parameters take its step; BatchNorm statistics are the weighted mean."""
    cfg = small("fedavg", "", "fedadam", "resnet20")
    model = initial_model(cfg)
    strategy = build_strategy(cfg, model)
    new, before = one_round_by_hand(cfg, strategy, ArrayRecord(model.state_dict()), 1, {})
    new = to_numpy(new)
    buffers = [name for name, _ in model.named_buffers()]
    assert set(strategy.inner.m_t) == {name for name, _ in model.named_parameters()}  # parameters only
    total = sum(w for _, w in before)
    for name in buffers:
        mean = sum(w * arrays[name].astype(np.float64) for arrays, w in before) / total
        if "num_batches_tracked" in name:
            assert new[name].dtype == np.int64 and new[name].shape == ()
            assert new[name] == np.rint(mean)
        else:
            np.testing.assert_allclose(new[name], mean.astype(np.float32), rtol=1e-6)


def test_fedavgm_momentum_starts_from_the_model_actually_sent():
    """FedAvgM's momentum over four rounds, by hand, when a part changes the aggregate (FedDyn's -h/alpha)."""
    cfg = small("feddyn", "", "fedavgm", "mlp")
    model = initial_model(cfg)
    strategy = build_strategy(cfg, model)
    (dyn,) = strategy.parts
    names = [name for name, _ in model.named_parameters()]
    arrays, states, momentum = ArrayRecord(model.state_dict()), {}, None
    for server_round in (1, 2, 3, 4):
        sent = to_numpy(arrays)
        arrays, before = one_round_by_hand(cfg, strategy, arrays, server_round, states)
        total = sum(w for _, w in before)
        previous, momentum = momentum, {}
        for name in names:
            average = sum((w / total) * a[name] for a, w in before)
            gradient = sent[name] - average
            momentum[name] = gradient if previous is None else 0.9 * previous[name] + gradient
            want = (sent[name] - 1.0 * momentum[name]) - dyn.h[name] / dyn.hyper.feddyn_alpha
            np.testing.assert_allclose(arrays[name].numpy(), want, rtol=1e-5, atol=1e-6)
        assert all(np.allclose(strategy.inner.momentum_vector[i], momentum[n]) for i, n in enumerate(names))
