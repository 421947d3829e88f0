"""FedProx, SCAFFOLD and FedDyn: their client and server rules, alone and under anchors.

Clients are built directly with a hand-made message and a `RecordDict` as context.state;
rounds with the server wrappers use the in-process round of tests/support/rounds.py.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from flwr.app import ArrayRecord, RecordDict

from clients import FedAvgClient
from clients.anchored import AnchorParams, round_mask
from clients.feddyn import GRAD, FedDynClient
from clients.fedprox import FedProxClient
from clients.scaffold import CLIENT_C, ScaffoldClient
from clients.scaffold import SCAFFOLD_C as SERVER_C
from clients.scaffold import SCAFFOLD_DELTA as DELTA
from clients.state import ClientStateStore
from fedpfn.core.cache import client_indices, initial_model
from fedpfn.core.protocol import ACCEPTED_ROUND, to_array_record, to_numpy
from fedpfn.core.seeding import Stream, seed_for
from fedpfn.core.training import effective_steps
from fedpfn.runtime.algorithms import anchor_method, build_strategy, client_rules
from fedpfn.runtime.engines.program import local_round
from fedpfn.runtime.runfolder import read_tree, tree_bytes
from fedpfn.runtime.server import train_config
from strategies.feddyn import FedDynServer
from strategies.scaffold import ScaffoldServer
from tests.support.config import tiny_config
from tests.support.rounds import NodeGrid, run_round

BATCH = 500  # 30 steps per client and round: enough to move, quick on a busy 2-core box
CPU = torch.device("cpu")


def cfg_for(algorithm: str, **overrides):
    return tiny_config(algorithm=algorithm, batch_size=BATCH, **overrides)


def start(cfg) -> dict[str, np.ndarray]:
    return {k: v.numpy() for k, v in initial_model(cfg).state_dict().items()}


def mask_seed(run_seed: int, server_round: int) -> int:
    return seed_for(run_seed, Stream.MASK, server_round)


def message(cfg, arrays: dict[str, np.ndarray], server_round: int = 1, accepted=None, **records):
    """`accepted`: the client's ACCEPTED_ROUND (None: every earlier reply was taken)."""
    config = train_config(cfg, server_round)
    config[ACCEPTED_ROUND] = server_round - 1 if accepted is None else accepted
    if anchor_method(cfg) is not None:
        config["anchor-seed"] = mask_seed(cfg.seed, server_round)
    return RecordDict({"arrays": to_array_record(arrays), "config": config, **records})


def fit(parts, cfg, content: RecordDict, state: RecordDict | None = None, pid: int = 0):
    """One local round of the client made of `parts` (a class or a list of classes)."""
    state = RecordDict() if state is None else state
    parts = parts if isinstance(parts, list) else [parts]
    reply = local_round(parts, cfg, pid, state, CPU, content)
    return to_numpy(reply.array_records["arrays"]), reply, state


def through_checkpoint(state):
    """A strategy state as a checkpoint stores it: arrays and plain values, no pickle."""
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "state.npz"
        path.write_bytes(tree_bytes(state))
        return read_tree(path)


def params(cfg) -> list[str]:
    return [n for n, _ in initial_model(cfg).named_parameters()]


def steps(cfg, pid: int = 0) -> int:
    return math.ceil(len(client_indices(cfg)[pid]) / cfg.local.batch_size) * cfg.local.local_epochs


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
        for K in (1, 7, 30):
            assert effective_steps(K, momentum) == pytest.approx(momentum_steps(K, momentum), rel=1e-12)


def test_scaffold_with_adam_is_refused():
    from fedpfn.core.config import ConfigError

    with pytest.raises(ConfigError, match="optimizer: scaffold is defined for sgd only"):
        cfg_for("scaffold", optimizer="adam")


def test_scaffold_client_control_variate_follows_its_rule_and_persists():
    cfg = cfg_for("scaffold")
    x1, names = start(cfg), params(cfg)
    K = momentum_steps(steps(cfg), cfg.local.momentum)
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


def test_a_client_continues_from_its_last_accepted_round_from_memory_or_disk():
    """Round 2's reply was dropped (accepted round 1 in round 3): its c_i is forgotten."""
    cfg = cfg_for("scaffold")
    x1, names = start(cfg), params(cfg)
    c = {SERVER_C: to_array_record(random_like(x1, names, 0.01, seed=1))}
    _, _, state = fit(ScaffoldClient, cfg, message(cfg, x1, 1, **c))
    taken = to_numpy(state.array_records[CLIENT_C])
    _, _, state = fit(ScaffoldClient, cfg, message(cfg, x1, 2, **c), state)
    dropped = to_numpy(state.array_records[CLIENT_C])
    y3, reply3, state = fit(ScaffoldClient, cfg, message(cfg, x1, 3, accepted=1, **c), state)
    ci3, delta3 = to_numpy(state.array_records[CLIENT_C]), to_numpy(reply3.array_records[DELTA])
    for n in names:
        np.testing.assert_allclose(delta3[n], ci3[n] - taken[n], rtol=1e-5, atol=1e-8)
    assert not all(np.allclose(delta3[n], ci3[n] - dropped[n], atol=1e-8) for n in names)
    # a new process (a resume) reads round 1's c_i from disk: the same round 3, bit for bit
    y3_new, *_ = fit(ScaffoldClient, cfg, message(cfg, x1, 3, accepted=1, **c), RecordDict())
    assert all(np.array_equal(y3[n], y3_new[n]) for n in y3)
    store = ClientStateStore(cfg.run_dir, 0).root / CLIENT_C
    assert sorted(p.name for p in store.iterdir()) == ["r1.npz", "r3.npz"]  # round 2's is gone


def test_a_stateful_client_refuses_a_message_without_its_accepted_round():
    cfg = cfg_for("scaffold")
    content = message(cfg, start(cfg))
    del content["config"][ACCEPTED_ROUND]
    with pytest.raises(ValueError, match="names no 'accepted-round'.*'scaffold-ci'"):
        fit(ScaffoldClient, cfg, content)
    fit(FedAvgClient, cfg, content)  # a client that keeps nothing needs none


def test_scaffold_server_control_variate_follows_its_rule_and_pickles():
    cfg = cfg_for("scaffold", server="fedadam", server_lr=0.003)
    model = initial_model(cfg)
    strategy = build_strategy(cfg, model)
    (server,) = strategy.parts
    assert isinstance(server, ScaffoldServer)
    names = params(cfg)
    arrays, states = ArrayRecord(model.state_dict()), {}
    c = {n: np.zeros_like(arrays[n].numpy()) for n in names}
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
        c = {n: (c[n] + total[n] / cfg.federation.num_clients).astype(np.float32) for n in names}
        assert set(server.c) == set(names)
        for n in names:
            np.testing.assert_allclose(server.c[n], c[n], rtol=1e-5, atol=1e-8)
            assert server.c[n].dtype == np.float32
        assert all(arrays[n].dtype == "float32" and np.isfinite(arrays[n].numpy()).all() for n in arrays.keys())
    assert any(np.abs(v).sum() > 0 for v in server.c.values())
    (sent,) = strategy.configure_train(3, arrays, train_config(cfg, 3), NodeGrid([0]))
    assert all(np.array_equal(sent.content[SERVER_C][n].numpy(), server.c[n]) for n in names)

    fresh = build_strategy(cfg, model)
    fresh.load_state(through_checkpoint(strategy.state()))
    assert all(np.array_equal(fresh.parts[0].c[n], server.c[n]) for n in names)
    assert all(np.array_equal(fresh.inner.m_t[n], strategy.inner.m_t[n]) for n in names)


# --- FedDyn -------------------------------------------------------------------------------


def test_feddyn_client_gradient_state_persists():
    cfg = cfg_for("feddyn", feddyn_alpha=0.1)
    x1, names = start(cfg), params(cfg)
    alpha = 0.1
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
    # the linear term acted: the client trains differently in round 2 when the server did
    # not take its round-1 reply (it then starts from no gradient state, as the server's h)
    y2_fresh, *_ = fit(FedDynClient, cfg, message(cfg, x2, 2, accepted=0))
    assert not all(np.array_equal(y2[n], y2_fresh[n]) for n in names)


def test_feddyn_server_state_follows_its_rule():
    cfg = cfg_for("feddyn", feddyn_alpha=0.1)
    model = initial_model(cfg)
    strategy = build_strategy(cfg, model)
    (server,) = strategy.parts
    assert isinstance(server, FedDynServer)
    names, alpha = params(cfg), 0.1
    arrays, states = ArrayRecord(model.state_dict()), {}
    h = {n: np.zeros_like(arrays[n].numpy()) for n in names}
    for server_round in (1, 2):
        sent = {k: v.numpy() for k, v in arrays.items()}
        arrays, _, replies, _ = run_round(cfg, strategy, arrays, server_round, states)
        local = [to_numpy(r.content.array_records["arrays"]) for r in replies]
        weights = [float(r.content.metric_records["metrics"]["num-examples"]) for r in replies]
        for n in names:
            shift = sum(w[n].astype(np.float64) - sent[n] for w in local)
            h[n] = (h[n] - alpha / cfg.federation.num_clients * shift).astype(np.float32)
            np.testing.assert_allclose(server.h[n], h[n], rtol=1e-5, atol=1e-8)
            mean = sum(wt * w[n].astype(np.float64) for wt, w in zip(weights, local)) / sum(weights)
            np.testing.assert_allclose(arrays[n].numpy(), mean - h[n] / alpha, rtol=1e-4, atol=1e-6)
    assert set(server.h) == set(names)
    fresh = build_strategy(cfg, model)
    fresh.load_state(through_checkpoint(strategy.state()))
    assert all(np.array_equal(fresh.parts[0].h[n], server.h[n]) for n in names)


# --- anchors over each rule ---------------------------------------------------------------


@pytest.mark.parametrize("rule", ["fedprox", "scaffold", "feddyn"])
def test_fedpfn_over_each_rule_keeps_anchors_bit_identical(rule):
    own = {"fedprox": {"prox_mu": 0.1}, "feddyn": {"feddyn_alpha": 0.1}}.get(rule, {})
    cfg = cfg_for(f"fedpfn+{rule}", **own)
    x, names = start(cfg), params(cfg)
    records = {SERVER_C: to_array_record(random_like(x, names, 0.01, seed=3))} if rule == "scaffold" else {}
    content = message(cfg, x, 1, **records)
    parts = client_rules(cfg)
    assert parts[0] is {"fedprox": FedProxClient, "scaffold": ScaffoldClient, "feddyn": FedDynClient}[rule]
    y, reply, state = fit(parts, cfg, content)
    anchor = cfg.hyper("fedpfn", AnchorParams)
    mask = round_mask(initial_model(cfg), anchor, int(content.config_records["config"]["anchor-seed"]))
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
    cfg = cfg_for(f"fedpnu+{rule}", **({"feddyn_alpha": 0.1} if rule == "feddyn" else {}))
    model = initial_model(cfg)
    strategy = build_strategy(cfg, model)
    rule_server, _ = strategy.parts
    assert isinstance(rule_server, {"scaffold": ScaffoldServer, "feddyn": FedDynServer}[rule])
    arrays, states = ArrayRecord(model.state_dict()), {}
    for server_round in (1, 2):
        sent = {k: v.numpy() for k, v in arrays.items()}
        arrays, _, replies, _ = run_round(cfg, strategy, arrays, server_round, states)
        new = {k: v.numpy() for k, v in arrays.items()}
        mask = round_mask(model, cfg.hyper("fedpnu", AnchorParams), mask_seed(cfg.seed, server_round))
        for n, m in mask.items():
            m = m.numpy()
            if rule == "scaffold":  # FedAvg's average of equal values: the anchor, bit for bit
                assert np.array_equal(new[n][m], sent[n][m]), f"{n}: an anchor moved"
            else:  # FedDyn's correction -h/alpha stands on anchored entries (anchor_server_step=keep)
                want = sent[n] - rule_server.h[n] / 0.1
                np.testing.assert_allclose(new[n][m], want[m], rtol=1e-6, atol=1e-7)
            assert np.isfinite(new[n]).all() and new[n].dtype == np.float32
        for reply in replies:
            assert list(reply.content.array_records) == ["arrays"]
    if rule == "scaffold":
        # c changed only on entries some client trained; FedPNU's packed deltas unpacked right
        assert any(np.abs(v).sum() > 0 for v in rule_server.c.values())
        assert all(np.isfinite(v).all() for v in rule_server.c.values())


# --- FedNova ------------------------------------------------------------------------------


def test_fednova_client_sends_its_normalised_update_and_its_normaliser():
    """w'_i = x + (y_i − x)/a_i with y_i the model FedAvg's rule trains, a_i = K_eff(τ_i)."""
    from clients.fednova import NORMALISER, FedNovaClient

    cfg = cfg_for("fednova")
    x, names = start(cfg), params(cfg)
    trained, *_ = fit(FedAvgClient, cfg, message(cfg, x))
    sent, reply, _ = fit(FedNovaClient, cfg, message(cfg, x))
    a = effective_steps(steps(cfg), cfg.local.momentum)
    assert reply["metrics"][NORMALISER] == pytest.approx(a, rel=1e-6)
    for n in names:
        np.testing.assert_allclose(sent[n], x[n] + (trained[n] - x[n]) / np.float32(a), rtol=1e-5, atol=1e-7)
    buffers = [n for n in x if n not in names]
    assert all(np.array_equal(sent[n], trained[n]) for n in buffers)


def test_fednova_server_rescales_the_averaged_step_by_tau_eff():
    """x⁺ = x − τ_eff Σ p_i d_i, with d_i = x − w'_i read off the replies and τ_eff = Σ p_i a_i."""
    from clients.fednova import NORMALISER

    cfg = cfg_for("fednova", num_clients=10, clients_per_round=3, partition="dirichlet", alpha=0.3)
    model = initial_model(cfg)
    strategy = build_strategy(cfg, model)
    arrays = ArrayRecord(model.state_dict())
    x = to_numpy(arrays)
    new, _, replies, _ = run_round(cfg, strategy, arrays, 1)
    weights = np.array([float(r.content["metrics"]["num-examples"]) for r in replies])
    p = weights / weights.sum()
    a = np.array([float(r.content["metrics"][NORMALISER]) for r in replies])
    assert len(set(a)) > 1  # unequal partitions: the normalisers differ
    tau_eff = float((p * a).sum())
    sent = [to_numpy(r.content["arrays"]) for r in replies]
    for n in params(cfg):
        d = sum(pi * (x[n].astype(np.float64) - s[n]) for pi, s in zip(p, sent))
        np.testing.assert_allclose(new[n].numpy(), x[n] - tau_eff * d, rtol=1e-5, atol=1e-6)


# --- per-client anchor masks (the study's control) ----------------------------------------------


def test_client_masks_freeze_a_mask_of_each_clients_own():
    """anchor_masks=client: each client keeps its own anchored entries bit for bit, the masks of two
    clients differ, and SCAFFOLD keeps c_i exactly where its client was frozen."""
    from clients.anchored import FedPFNClient

    cfg = cfg_for("fedpfn+scaffold", anchor_masks="client")
    x, names = start(cfg), params(cfg)
    c = {SERVER_C: to_array_record(random_like(x, names, 0.01, seed=3))}
    frozen = {}
    for pid in (0, 1):
        y, reply, _ = fit(client_rules(cfg), cfg, message(cfg, x, 1, **c), pid=pid)
        delta = to_numpy(reply.array_records[DELTA])
        moved = {n: y[n] != x[n] for n in names}
        kept = {n: ~moved[n] for n in names}
        assert all(not delta[n][kept[n]].any() for n in names)  # c_i kept where nothing trained
        frozen[pid] = kept
        share = sum(int(k.sum()) for k in kept.values()) / sum(k.size for k in kept.values())
        assert 0.38 < share < 0.45, share  # rho = 0.4 frozen (and a few entries that did not move)
    assert any(not np.array_equal(frozen[0][n], frozen[1][n]) for n in names)
    assert FedPFNClient.problems(cfg.hyper("fedpfn", AnchorParams)) == []


def test_client_masks_are_refused_for_fedpnu():
    from fedpfn.core.config import ConfigError

    with pytest.raises(ConfigError, match="anchor_masks: 'client' is for fedpfn"):
        cfg_for("fedpnu", anchor_masks="client")
