"""Every algorithm declared once: its settings agree with RunConfig, the command line and
pyproject; MOON's update matches the paper on a tiny case. (The layout's rules:
tests/unit/test_architecture.py.)
"""

from __future__ import annotations

import dataclasses
import tomllib
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from flwr.app import ArrayRecord, ConfigRecord, RecordDict

from fedpfn.core import protocol
from fedpfn.core.config import RunConfig, RunFlags
from fedpfn.core.hyper import dotted
from fedpfn.runtime.algorithms import (
    ANCHOR_METHODS,
    CLIENT_RULES,
    flower_run_config,
    from_run_config,
    hparam_fields,
    hparam_parts,
    load_config,
    validated,
)
from tests.support.config import tiny_config

ROOT = Path(__file__).resolve().parents[2]


# --- declarations -----------------------------------------------------------------------------


def test_every_declared_setting_is_a_flag_a_config_key_and_a_flower_key():
    from run_sim import build_parser

    flags = {a.dest for a in build_parser()._actions}
    core = {f.name for f in dataclasses.fields(RunFlags)}  # the settings as typed: a group's as its flags
    declared = core | set(hparam_fields())
    assert {name for name in declared if "." not in name} <= flags  # a hyperparameter's flag: its name
    tables = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["flwr"]["app"]["config"]
    pyproject = dotted(tables)  # as Flower flattens them: fedprox.prox-mu
    assert pyproject == flower_run_config(), "pyproject is out of date: run `python -m fedpfn.runtime.algorithms`"
    assert {k.replace("-", "_") for k in pyproject} == declared
    assert load_config(from_run_config(pyproject)).to_dict() == validated(RunConfig()).to_dict()


def test_every_algorithm_declares_a_name_and_its_parameters():
    for name, algorithm in {**CLIENT_RULES, **ANCHOR_METHODS}.items():
        assert algorithm.name == name
        assert dataclasses.is_dataclass(algorithm.Params)
        for f in dataclasses.fields(algorithm.Params):
            assert f.metadata["help"], f"{name}.{f.name} has no help"
    assert set(hparam_parts()) >= {rule.namespace() for rule in {**CLIENT_RULES, **ANCHOR_METHODS}.values()}


def test_a_hyperparameter_of_another_algorithm_is_refused_unless_default():
    from fedpfn.core.config import ConfigError

    with pytest.raises(ConfigError, match="prox_mu: 0.5 is set, but fedavg with server fedavg does not use it"):
        tiny_config(algorithm="fedavg", prox_mu=0.5)
    assert not {"prox_mu", "fedprox.prox_mu"} & set(tiny_config(algorithm="fedavg", prox_mu=0.01).to_dict())
    assert tiny_config(algorithm="fedprox", prox_mu=0.5).to_dict()["fedprox.prox_mu"] == 0.5


def test_resolved_config_names_the_granularity():
    assert tiny_config(algorithm="fedpfn").to_dict()["fedpfn.anchor_granularity"] == "weight"
    assert tiny_config(algorithm="fedpnu").to_dict()["fedpnu.anchor_granularity"] == "neuron"


# --- MOON against its paper ------------------------------------------------------------------


def test_moon_step_matches_the_papers_loss_on_a_tiny_case():
    """One SGD step of MOON's client equals w − lr·∇(CE + mu·l_con), l_con written out by hand."""
    from clients.moon import PREVIOUS, MoonClient
    from clients.state import SAVED_IN
    from fedpfn.core.cache import client_indices, dataset_for, initial_model
    from fedpfn.runtime.engines.program import local_round
    from fedpfn.runtime.server import train_config

    cfg = tiny_config(algorithm="moon", num_clients=1000, clients_per_round=2, momentum=0.0,
                      weight_decay=0.0, batch_size=100, moon_mu=2.0, moon_temperature=0.5)
    pid = 3
    x_idx = client_indices(cfg)[pid]
    assert len(x_idx) <= cfg.local.batch_size  # one step
    data = dataset_for(cfg)
    x, y = data.train_x[x_idx], data.train_y[x_idx]
    global_model = initial_model(cfg)
    previous = initial_model(tiny_config(seed=1))  # another model as the client's previous one
    state = RecordDict({PREVIOUS: ArrayRecord(previous.state_dict()), SAVED_IN: ConfigRecord({PREVIOUS: 1})})
    config = train_config(cfg, 2)
    config[protocol.ACCEPTED_ROUND] = 1  # round 1's reply was taken: its model is the previous one
    content = RecordDict({"arrays": ArrayRecord(global_model.state_dict()), "config": config})
    reply = local_round([MoonClient], cfg, pid, state, torch.device("cpu"), content)
    trained = protocol.to_numpy(reply["arrays"])

    model = initial_model(cfg)

    def features(net, inputs):
        return net.features(inputs).flatten(1)

    z = features(model, x)
    with torch.no_grad():
        z_glob, z_prev = features(global_model, x), features(previous, x)

    def cos(a, b):
        return (a * b).sum(1) / (a.norm(dim=1) * b.norm(dim=1)).clamp_min(1e-8)

    tau = 0.5
    positive, negative = torch.exp(cos(z, z_glob) / tau), torch.exp(cos(z, z_prev) / tau)
    l_con = -torch.log(positive / (positive + negative)).mean()
    loss = F.cross_entropy(model.classifier(z), y) + 2.0 * l_con
    loss.backward()
    for name, p in model.named_parameters():
        want = (p - cfg.local.lr * p.grad).detach().numpy()
        np.testing.assert_allclose(trained[name], want, rtol=1e-4, atol=1e-6, err_msg=name)
    assert not np.allclose(trained["features.1.weight"], _fedavg_step(cfg, pid, global_model)["features.1.weight"])


def _fedavg_step(cfg, pid, model):
    from clients import FedAvgClient
    from fedpfn.runtime.engines.program import local_round
    from fedpfn.runtime.server import train_config

    content = RecordDict({"arrays": ArrayRecord(model.state_dict()), "config": train_config(cfg, 2)})
    return protocol.to_numpy(local_round([FedAvgClient], cfg, pid, RecordDict(), torch.device("cpu"), content)["arrays"])


