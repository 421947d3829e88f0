"""FedPFN / FedPNU rounds on the server side: seeds, anchored entries, FedPNU's partial upload."""

from __future__ import annotations

import numpy as np
import pytest
from flwr.app import ArrayRecord

from clients.anchored import AnchorParams, FedPNUClient, round_mask
from fedpfn.runtime.algorithms import build_strategy
from fedpfn.core.cache import initial_model
from fedpfn.core.protocol import to_numpy
from fedpfn.core.seeding import Stream, seed_for
from fedpfn.runtime.server import train_config
from strategies import sample_clients
from tests.support.config import tiny_config
from tests.support.rounds import NodeGrid, run_round

SERVERS = ["fedavg", "fedavgm", "fedadam", "fedyogi", "fedadagrad", "user_strategy:HalfwayFedAvg"]
SERVER_LR = {"fedadam": 0.01, "fedyogi": 0.01, "fedadagrad": 0.01}

SMALL = {"num_clients": 1000}  # 60 images a client, a step each: what a rule does to the entries shows as on more


def start(cfg):
    model = initial_model(cfg)
    return model, ArrayRecord(model.state_dict())


def mask_of(model, cfg, server_round: int) -> dict[str, np.ndarray]:
    anchors = cfg.hyper(cfg.algorithm.partition("+")[0], AnchorParams)
    key = 0 if anchors.anchor_schedule == "fixed" else server_round
    mask = round_mask(model, anchors, seed_for(cfg.seed, Stream.MASK, key))
    return {name: m.numpy() for name, m in mask.items()}


@pytest.mark.parametrize("server", SERVERS)
@pytest.mark.parametrize("algorithm", ["fedpfn", "fedpnu"])
def test_round_one_keeps_every_anchor_with_every_server(algorithm, server, monkeypatch):
    """In round 1 no server state exists yet: every server leaves the anchored entries exact."""
    monkeypatch.syspath_prepend(str(__import__("pathlib").Path(__file__).parents[1] / "support"))  # user_strategy.py
    extra = {"server_lr": SERVER_LR[server]} if server in SERVER_LR else {}
    cfg = tiny_config(algorithm=algorithm, server=server, **SMALL, **extra)
    model, arrays = start(cfg)
    new, metrics, _, _ = run_round(cfg, build_strategy(cfg, model), arrays, server_round=1)
    before, after = to_numpy(arrays), to_numpy(new)
    for name, m in mask_of(model, cfg, 1).items():
        assert np.array_equal(after[name][m], before[name][m]), f"{name}: an anchor moved"
        assert not np.array_equal(after[name][~m], before[name][~m]), f"{name}: nothing trained"
        assert after[name].dtype == before[name].dtype == np.float32
    assert np.isfinite(metrics["train-loss"])


def test_every_client_of_a_round_gets_the_same_seed_and_a_new_one_next_round():
    cfg = tiny_config(algorithm="fedpfn", **SMALL)
    model, arrays = start(cfg)
    strategy = build_strategy(cfg, model)

    def seeds(server_round):
        chosen = sample_clients(cfg.seed, server_round, cfg.federation.num_clients, cfg.federation.clients_per_round)
        messages = strategy.configure_train(server_round, arrays, train_config(cfg, server_round), NodeGrid(chosen))
        return {int(m.content.config_records["config"]["anchor-seed"]) for m in messages}

    first, second = seeds(1), seeds(2)
    assert len(first) == 1 and len(second) == 1 and first != second


def test_fedpnu_partial_upload_rebuilds_what_a_full_upload_gives(monkeypatch):
    cfg = tiny_config(algorithm="fedpnu", **SMALL)
    model, arrays = start(cfg)
    partial, _, _, up_partial = run_round(cfg, build_strategy(cfg, model), arrays, 1)
    monkeypatch.setattr(FedPNUClient, "partial_upload", False)
    strategy = build_strategy(cfg, model)
    strategy.parts[0].partial_upload = False
    full, _, _, up_full = run_round(cfg, strategy, arrays, 1)
    a, b = to_numpy(partial), to_numpy(full)
    assert all(np.array_equal(a[n], b[n]) for n in a)
    assert 0.55 < up_partial / up_full < 0.65  # about 1 - rho = 0.6


@pytest.mark.parametrize("server", ["fedavgm", "fedadam"])
def test_fixed_schedule_keeps_the_initial_anchors_for_the_whole_run(server):
    cfg = tiny_config(algorithm="fedpfn", anchor_schedule="fixed", server=server, server_lr=0.01, **SMALL)
    model, arrays = start(cfg)
    strategy = build_strategy(cfg, model)
    current = arrays
    for server_round in (1, 2, 3):
        current, *_ = run_round(cfg, strategy, current, server_round)
    begin, end = to_numpy(arrays), to_numpy(current)
    for name, m in mask_of(model, cfg, 1).items():
        assert np.array_equal(end[name][m], begin[name][m]), name


def test_round_schedule_reset_writes_the_anchors_back_under_a_server_optimizer():
    """`anchor_server_step=reset` cancels the server's own step on anchored entries; `keep` does not."""
    moved = {}
    for step in ("keep", "reset"):
        cfg = tiny_config(algorithm="fedpfn", server="fedavgm", anchor_server_step=step, **SMALL)
        model, arrays = start(cfg)
        strategy = build_strategy(cfg, model)
        current = arrays
        for server_round in (1, 2):
            sent = to_numpy(current)
            current, *_ = run_round(cfg, strategy, current, server_round)
        end = to_numpy(current)
        moved[step] = sum(int((end[n][m] != sent[n][m]).sum()) for n, m in mask_of(model, cfg, 2).items())
    assert moved["reset"] == 0  # round 2's anchors equal what was sent
    assert moved["keep"] > 0  # FedAvgM's momentum from round 1 moves them


def test_sampling_is_seeded_and_uses_partition_ids():
    a = sample_clients(3, 5, 100, 10)
    assert a == sample_clients(3, 5, 100, 10)
    assert a != sample_clients(3, 6, 100, 10)
    assert len(set(a)) == 10 and all(0 <= p < 100 for p in a)
