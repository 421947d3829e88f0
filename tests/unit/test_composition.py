"""Every client rule with every anchor method and every server algorithm, on every model family.

Three rounds through the real strategies, clients and Flower messages (tests/support/rounds.py's
in-process round): finite outputs, the exact shapes and dtypes sent (0-d counters included), BatchNorm
running variances never negative, and the same numbers bit for bit on a second run. The
matrix is the registry's (a new client rule or server algorithm joins it by registering,
tests/support/composition.py): the MLP runs all of it; the CNN runs a seeded sample; ResNet-20
(BatchNorm) runs every server with every anchor method, the client rule cycling, in
tests/integration/test_composition_resnet20.py (minutes of training, too long for tests/unit).
"""

from __future__ import annotations

import numpy as np
import pytest
from flwr.app import ArrayRecord

from fedpfn.core.cache import initial_model
from fedpfn.core.protocol import to_numpy
from fedpfn.runtime.algorithms import build_strategy
from tests.support.composition import CNN_CASES, MLP_CASES, check_case, small
from tests.support.rounds import client_replies


@pytest.mark.parametrize("rule,anchor,server", MLP_CASES, ids=["-".join(c) for c in MLP_CASES])
def test_mlp_matrix(rule, anchor, server):
    check_case(rule, anchor, server, "mlp")


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
