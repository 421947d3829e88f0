"""FedPFN / FedPNU rounds with every server algorithm: real strategies, clients and messages."""

from __future__ import annotations

import numpy as np
import pytest
from flwr.app import ArrayRecord

from clients.anchored import round_mask
from conftest import NodeGrid, run_round, tiny_config
from fedpfn.anchors import mask_seed
from fedpfn.config import ConfigError
from fedpfn.server import round_config
from fedpfn.workspace import initial_model
from strategies import build_strategy, sample_clients

SERVERS = ["fedavg", "fedavgm", "fedadam", "fedyogi", "fedadagrad", "user_strategy:HalfwayFedAvg"]


def _start(cfg):
    model = initial_model(cfg)
    return model, ArrayRecord(model.state_dict())


def _np(arrays: ArrayRecord) -> dict[str, np.ndarray]:
    return {k: v.numpy() for k, v in arrays.items()}


@pytest.mark.parametrize("server", SERVERS)
@pytest.mark.parametrize("algorithm", ["fedpfn", "fedpnu"])
def test_anchored_round_with_every_server(algorithm, server):
    cfg = tiny_config(algorithm=algorithm, server=server)
    model, arrays = _start(cfg)
    strategy = build_strategy(cfg, model)
    new, metrics, _, _ = run_round(cfg, strategy, arrays, server_round=1)
    before, after = _np(arrays), _np(new)
    mask = round_mask(model, cfg, mask_seed(cfg.seed, 1, cfg.anchor_schedule))
    for name, m in mask.items():
        m = m.numpy()
        assert np.array_equal(after[name][m], before[name][m]), f"{name}: an anchor moved"
        assert not np.array_equal(after[name][~m], before[name][~m]), f"{name}: nothing trained"
        assert after[name].dtype == before[name].dtype == np.float32
    assert np.isfinite(metrics["train-loss"])


def test_every_client_of_a_round_gets_the_same_seed_and_a_new_one_next_round():
    cfg = tiny_config(algorithm="fedpfn")
    model, arrays = _start(cfg)
    strategy = build_strategy(cfg, model)

    def seeds(server_round):
        chosen = sample_clients(cfg.seed, server_round, cfg.num_clients, cfg.clients_per_round)
        messages = strategy.configure_train(server_round, arrays, round_config(cfg, server_round), NodeGrid(chosen))
        return {int(m.content.config_records["config"]["anchor-seed"]) for m in messages}

    first, second = seeds(1), seeds(2)
    assert len(first) == 1 and len(second) == 1 and first != second


def test_fedpnu_partial_upload_rebuilds_what_a_full_upload_gives():
    cfg = tiny_config(algorithm="fedpnu")
    model, arrays = _start(cfg)
    partial, _, _, up_partial = run_round(cfg, build_strategy(cfg, model), arrays, 1)

    from clients.anchored import FedPNU

    FedPNU.partial_upload = False
    try:
        strategy = build_strategy(cfg, model)
        strategy.partial_upload = False
        full, _, _, up_full = run_round(cfg, strategy, arrays, 1)
    finally:
        FedPNU.partial_upload = True
    a, b = _np(partial), _np(full)
    assert all(np.array_equal(a[n], b[n]) for n in a)
    assert 0.5 < up_partial / up_full < 0.7  # about 1 - rho = 0.6


def test_fixed_schedule_keeps_the_initial_anchors_for_the_whole_run():
    cfg = tiny_config(algorithm="fedpfn", anchor_schedule="fixed", server="fedadam")
    model, arrays = _start(cfg)
    strategy = build_strategy(cfg, model)
    current = arrays
    for server_round in (1, 2, 3):
        current, *_ = run_round(cfg, strategy, current, server_round)
    mask = round_mask(model, cfg, mask_seed(cfg.seed, 1, "fixed"))
    start, end = _np(arrays), _np(current)
    for name, m in mask.items():
        assert np.array_equal(end[name][m.numpy()], start[name][m.numpy()])


def test_user_strategy_path_errors_are_clear():
    from strategies import load_strategy_class

    with pytest.raises(ConfigError, match="cannot import module 'no_such_module'"):
        load_strategy_class("no_such_module:Thing")
    with pytest.raises(ConfigError, match="not a flwr.serverapp.strategy.Strategy subclass"):
        load_strategy_class("user_strategy:np")


def test_sampling_is_seeded_and_uses_partition_ids():
    a = sample_clients(3, 5, 100, 10)
    assert a == sample_clients(3, 5, 100, 10)
    assert a != sample_clients(3, 6, 100, 10)
    assert len(set(a)) == 10 and all(0 <= p < 100 for p in a)
