"""FedProx, SCAFFOLD and FedDyn: their client and server rules, alone and under anchors.

Clients are built directly with a hand-made message and a `RecordDict` as context.state;
rounds with the server wrappers use conftest's in-process round; one test runs the Ray
simulation end to end.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
from flwr.app import ArrayRecord, RecordDict

from clients import FedAvgClient, client_class
from clients.anchored import round_mask
from clients.feddyn import GRAD, FedDynClient
from clients.fedprox import FedProxClient
from clients.scaffold import CLIENT_C, DELTA, SERVER_C, ScaffoldClient
from conftest import NodeGrid, run_round, tiny_config
from fedpfn.anchors import mask_seed
from fedpfn.records import to_array_record, to_numpy
from fedpfn.server import load_strategy_state, round_config, strategy_state
from fedpfn.workspace import client_indices, initial_model
from strategies import build_strategy
from strategies.feddyn import FedDynServer
from strategies.scaffold import ScaffoldServer

BATCH = 500  # 30 steps per client and round: enough to move, quick on a busy 2-core box
CPU = torch.device("cpu")


def cfg_for(algorithm: str, **overrides):
    return tiny_config(algorithm=algorithm, batch_size=BATCH, **overrides)


def start(cfg) -> dict[str, np.ndarray]:
    return {k: v.numpy() for k, v in initial_model(cfg).state_dict().items()}


def message(cfg, arrays: dict[str, np.ndarray], server_round: int = 1, **records) -> RecordDict:
    config = round_config(cfg, server_round)
    if cfg.anchor_method is not None:
        config["anchor-seed"] = mask_seed(cfg.seed, server_round, cfg.anchor_schedule)
    return RecordDict({"arrays": to_array_record(arrays), "config": config, **records})


def fit(cls, cfg, content: RecordDict, state: RecordDict | None = None, pid: int = 0):
    state = RecordDict() if state is None else state
    reply = cls(cfg, pid, state, CPU).fit(content)
    return to_numpy(reply.array_records["arrays"]), reply, state


def params(cfg) -> list[str]:
    return [n for n, _ in initial_model(cfg).named_parameters()]


def steps(cfg, pid: int = 0) -> int:
    return math.ceil(len(client_indices(cfg)[pid]) / cfg.batch_size) * cfg.local_epochs


def distance(a, b, names) -> float:
    return float(np.sqrt(sum(((a[n] - b[n]).astype(np.float64) ** 2).sum() for n in names)))


def random_like(arrays, names, scale, seed):
    rng = np.random.default_rng(seed)
    return {n: (scale * rng.standard_normal(arrays[n].shape)).astype(np.float32) for n in names}


# --- FedProx ------------------------------------------------------------------------------


def test_fedprox_with_a_large_mu_stays_closer_to_the_global_model():
    cfg = cfg_for("fedprox", prox_mu=1.0)
    w0, names = start(cfg), params(cfg)
    avg, *_ = fit(FedAvgClient, cfg, message(cfg, w0))
    prox, *_ = fit(FedProxClient, cfg, message(cfg, w0))
    d_avg, d_prox = distance(avg, w0, names), distance(prox, w0, names)
    assert d_prox < 0.6 * d_avg, (d_prox, d_avg)
    # mu = 0 is FedAvg, bit for bit
    same, *_ = fit(FedProxClient, cfg_for("fedprox", prox_mu=0.0), message(cfg, w0))
    assert all(np.array_equal(same[n], avg[n]) for n in avg)


# --- SCAFFOLD -----------------------------------------------------------------------------


def momentum_steps(K: int, beta: float) -> float:
    """How far K momentum-SGD steps under a constant gradient go, in plain-SGD steps."""
    return sum((1 - beta**k) / (1 - beta) for k in range(1, K + 1)) if beta else float(K)


def test_scaffold_effective_steps():
    for momentum in (0.0, 0.5, 0.9):
        client = ScaffoldClient(cfg_for("scaffold", momentum=momentum), 0, RecordDict(), CPU)
        for K in (1, 7, 30):
            assert client.effective_steps(K) == pytest.approx(momentum_steps(K, momentum), rel=1e-12)
    adam = ScaffoldClient(cfg_for("scaffold", optimizer="adam"), 0, RecordDict(), CPU)
    assert adam.effective_steps(30) == 30


def test_scaffold_client_control_variate_follows_its_rule_and_persists():
    cfg = cfg_for("scaffold")
    x1, names = start(cfg), params(cfg)
    K = momentum_steps(steps(cfg), cfg.momentum)
    state = RecordDict()

    # with c = c_i = 0 the correction is zero: the same model as FedAvg, bit for bit
    zero = {n: np.zeros_like(x1[n]) for n in names}
    plain, *_ = fit(FedAvgClient, cfg, message(cfg, x1))
    y0, *_ = fit(ScaffoldClient, cfg, message(cfg, x1, **{SERVER_C: to_array_record(zero)}))
    assert all(np.array_equal(y0[n], plain[n]) for n in plain)

    # round 1: the client's first, so c_i = 0
    c1 = random_like(x1, names, 0.01, seed=1)
    y1, reply1, state = fit(ScaffoldClient, cfg, message(cfg, x1, 1, **{SERVER_C: to_array_record(c1)}), state)
    assert not all(np.array_equal(y1[n], plain[n]) for n in names)  # the correction acted
    lr1 = cfg.lr_at(1)
    ci1 = to_numpy(state.array_records[CLIENT_C])
    delta1 = to_numpy(reply1.array_records[DELTA])
    assert set(ci1) == set(delta1) == set(names)  # parameters only
    for n in names:
        want = np.float32(0) - c1[n] + (x1[n] - y1[n]) / np.float32(K * lr1)
        np.testing.assert_allclose(ci1[n], want, rtol=1e-5, atol=1e-8)
        np.testing.assert_allclose(delta1[n], ci1[n], rtol=1e-6, atol=1e-9)
        assert ci1[n].dtype == np.float32

    # round 2 starts from round 1's c_i (a fresh client object, the same context.state)
    x2 = {**x1, **{n: y1[n] for n in names}}
    c2 = random_like(x1, names, 0.01, seed=2)
    y2, reply2, state = fit(ScaffoldClient, cfg, message(cfg, x2, 2, **{SERVER_C: to_array_record(c2)}), state)
    lr2 = cfg.lr_at(2)
    ci2 = to_numpy(state.array_records[CLIENT_C])
    delta2 = to_numpy(reply2.array_records[DELTA])
    for n in names:
        want = ci1[n] - c2[n] + (x2[n] - y2[n]) / np.float32(K * lr2)
        np.testing.assert_allclose(ci2[n], want, rtol=1e-5, atol=1e-8)
        np.testing.assert_allclose(delta2[n], ci2[n] - ci1[n], rtol=1e-5, atol=1e-8)


def test_scaffold_server_control_variate_follows_its_rule_and_pickles():
    cfg = cfg_for("scaffold", server="fedadam")
    model = initial_model(cfg)
    strategy = build_strategy(cfg, model)
    assert isinstance(strategy, ScaffoldServer)
    names = params(cfg)
    assert set(strategy.c) == set(names)
    arrays, states, c = ArrayRecord(model.state_dict()), {}, {n: np.zeros_like(v) for n, v in strategy.c.items()}
    for server_round in (1, 2):
        before = {pid: to_numpy(s.array_records[CLIENT_C]) for pid, s in states.items()}
        arrays, metrics, replies, _ = run_round(cfg, strategy, arrays, server_round, states)
        for reply in replies:  # the delta was taken out: Flower saw one ArrayRecord per reply
            assert list(reply.content.array_records) == ["arrays"]
        total = {n: np.zeros(c[n].shape, np.float64) for n in names}
        for reply in replies:
            pid = int(reply.content.metric_records["metrics"]["partition-id"])
            after = to_numpy(states[pid].array_records[CLIENT_C])
            for n in names:
                total[n] += after[n] - (before[pid][n] if pid in before else 0)
        c = {n: (c[n] + total[n] / cfg.num_clients).astype(np.float32) for n in names}
        for n in names:
            np.testing.assert_allclose(strategy.c[n], c[n], rtol=1e-5, atol=1e-8)
            assert strategy.c[n].dtype == np.float32
        assert all(arrays[n].dtype == "float32" and np.isfinite(arrays[n].numpy()).all() for n in arrays.keys())
    assert any(np.abs(v).sum() > 0 for v in strategy.c.values())
    (sent,) = strategy.configure_train(3, arrays, round_config(cfg, 3), NodeGrid([0]))
    assert all(np.array_equal(sent.content[SERVER_C][n].numpy(), strategy.c[n]) for n in names)

    fresh = build_strategy(cfg, model)
    load_strategy_state(fresh, strategy_state(strategy))
    assert all(np.array_equal(fresh.c[n], strategy.c[n]) for n in names)


# --- FedDyn -------------------------------------------------------------------------------


def test_feddyn_client_gradient_state_persists():
    cfg = cfg_for("feddyn", feddyn_alpha=0.1)
    x1, names = start(cfg), params(cfg)
    alpha = cfg.feddyn_alpha
    y1, _, state = fit(FedDynClient, cfg, message(cfg, x1, 1))
    g1 = to_numpy(state.array_records[GRAD])
    assert set(g1) == set(names)
    for n in names:
        np.testing.assert_allclose(g1[n], -alpha * (y1[n] - x1[n]), rtol=1e-5, atol=1e-9)
    x2 = {**x1, **{n: y1[n] for n in names}}
    y2, _, state = fit(FedDynClient, cfg, message(cfg, x2, 2), state)
    g2 = to_numpy(state.array_records[GRAD])
    for n in names:
        np.testing.assert_allclose(g2[n], g1[n] - alpha * (y2[n] - x2[n]), rtol=1e-5, atol=1e-9)
    # the linear term acted: a fresh client from the same start trains differently
    y2_fresh, *_ = fit(FedDynClient, cfg, message(cfg, x2, 2))
    assert not all(np.array_equal(y2[n], y2_fresh[n]) for n in names)


def test_feddyn_server_state_follows_its_rule():
    cfg = cfg_for("feddyn", feddyn_alpha=0.1)
    model = initial_model(cfg)
    strategy = build_strategy(cfg, model)
    assert isinstance(strategy, FedDynServer)
    names, alpha = params(cfg), cfg.feddyn_alpha
    arrays, states = ArrayRecord(model.state_dict()), {}
    h = {n: np.zeros_like(v) for n, v in strategy.h.items()}
    for server_round in (1, 2):
        sent = {k: v.numpy() for k, v in arrays.items()}
        arrays, _, replies, _ = run_round(cfg, strategy, arrays, server_round, states)
        local = [to_numpy(r.content.array_records["arrays"]) for r in replies]
        weights = [float(r.content.metric_records["metrics"]["num-examples"]) for r in replies]
        for n in names:
            shift = sum(w[n].astype(np.float64) - sent[n] for w in local)
            h[n] = (h[n] - alpha / cfg.num_clients * shift).astype(np.float32)
            np.testing.assert_allclose(strategy.h[n], h[n], rtol=1e-5, atol=1e-8)
            mean = sum(wt * w[n].astype(np.float64) for wt, w in zip(weights, local)) / sum(weights)
            np.testing.assert_allclose(arrays[n].numpy(), mean - h[n] / alpha, rtol=1e-4, atol=1e-6)
    assert set(strategy.h) == set(names)
    fresh = build_strategy(cfg, model)
    load_strategy_state(fresh, strategy_state(strategy))
    assert all(np.array_equal(fresh.h[n], strategy.h[n]) for n in names)


# --- anchors over each rule ---------------------------------------------------------------


@pytest.mark.parametrize("rule", ["fedprox", "scaffold", "feddyn"])
def test_fedpfn_over_each_rule_keeps_anchors_bit_identical(rule):
    cfg = cfg_for(f"fedpfn+{rule}", prox_mu=0.1, feddyn_alpha=0.1)
    x, names = start(cfg), params(cfg)
    records = {SERVER_C: to_array_record(random_like(x, names, 0.01, seed=3))} if rule == "scaffold" else {}
    content = message(cfg, x, 1, **records)
    cls = client_class(cfg)
    assert issubclass(cls, {"fedprox": FedProxClient, "scaffold": ScaffoldClient, "feddyn": FedDynClient}[rule])
    y, reply, state = fit(cls, cfg, content)
    mask = round_mask(initial_model(cfg), cfg, int(content.config_records["config"]["anchor-seed"]))
    assert set(mask) == set(names)
    for n, m in mask.items():
        m = m.numpy()
        assert np.array_equal(y[n][m], x[n][m]), f"{n}: an anchor moved"
        assert not np.array_equal(y[n][~m], x[n][~m]), f"{n}: nothing trained"
    if rule == "scaffold":  # anchored entries did not train: their c_i is kept (delta 0)
        delta = to_numpy(reply.array_records[DELTA])
        assert all(not delta[n][m.numpy()].any() and delta[n][~m.numpy()].any() for n, m in mask.items())
    if rule == "feddyn":
        g = to_numpy(state.array_records[GRAD])
        assert all(not g[n][m.numpy()].any() for n, m in mask.items())


@pytest.mark.parametrize("rule", ["scaffold", "feddyn"])
def test_fedpnu_partial_upload_through_the_rule_wrappers(rule):
    cfg = cfg_for(f"fedpnu+{rule}", feddyn_alpha=0.1)
    model = initial_model(cfg)
    strategy = build_strategy(cfg, model)
    assert isinstance(strategy.inner, {"scaffold": ScaffoldServer, "feddyn": FedDynServer}[rule])
    arrays, states = ArrayRecord(model.state_dict()), {}
    for server_round in (1, 2):
        sent = {k: v.numpy() for k, v in arrays.items()}
        arrays, _, replies, _ = run_round(cfg, strategy, arrays, server_round, states)
        new = {k: v.numpy() for k, v in arrays.items()}
        mask = round_mask(model, cfg, mask_seed(cfg.seed, server_round, cfg.anchor_schedule))
        for n, m in mask.items():
            m = m.numpy()
            assert np.array_equal(new[n][m], sent[n][m]), f"{n}: an anchor moved"
            assert np.isfinite(new[n]).all() and new[n].dtype == np.float32
        for reply in replies:
            assert list(reply.content.array_records) == ["arrays"]
    if rule == "scaffold":
        # c changed only on entries some client trained; FedPNU's packed deltas unpacked right
        assert any(np.abs(v).sum() > 0 for v in strategy.inner.c.values())
        assert all(np.isfinite(v).all() for v in strategy.inner.c.values())


# --- one real Ray simulation ----------------------------------------------------------------


def test_ray_simulation_runs_scaffold_and_feddyn(tmp_path):
    from fedpfn.simulation import simulate

    for algorithm, server in (("fedpfn+scaffold", "fedavg"), ("feddyn", "fedadam")):
        cfg = tiny_config(
            algorithm=algorithm, server=server, batch_size=BATCH, out=str(tmp_path / algorithm)
        )
        summary = simulate(cfg, show_progress=False)
        rows = [json.loads(line) for line in (tmp_path / algorithm / "metrics.jsonl").read_text().splitlines()]
        assert [r["round"] for r in rows] == [1, 2], algorithm
        assert all(math.isfinite(r["test_accuracy"]) and r["num_clients"] == 2 for r in rows), rows
        assert math.isfinite(summary["final_test_accuracy"])
