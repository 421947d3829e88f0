"""One place per algorithm, one message protocol, one seeding rule: the architecture holds.

Declarations agree with RunConfig, the command line and pyproject; clients/ and strategies/
never import each other; message keys are written only in fedpfn/core/protocol.py; seeds are
derived only in fedpfn/core/seeding.py; MOON's update matches the paper on a tiny case.
"""

from __future__ import annotations

import ast
import dataclasses
import tomllib
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from flwr.app import ArrayRecord, ConfigRecord, RecordDict

from conftest import tiny_config
from fedpfn.core import protocol
from fedpfn.runtime.algorithms import ANCHOR_METHODS, CLIENT_RULES, hparam_classes, hparam_fields
from fedpfn.core.config import RunConfig, flower_run_config

ROOT = Path(__file__).resolve().parents[1]


def python_files(*packages: str) -> list[Path]:
    return [p for package in packages for p in sorted((ROOT / package).rglob("*.py"))]


def imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


# --- declarations -----------------------------------------------------------------------------


def test_every_declared_setting_is_a_flag_a_config_key_and_a_flower_key():
    from run_sim import build_parser

    flags = {a.dest for a in build_parser()._actions}
    core = {f.name for f in dataclasses.fields(RunConfig) if f.name != "hparams"}
    declared = core | set(hparam_fields())
    assert declared <= flags
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["flwr"]["app"]["config"]
    assert pyproject == flower_run_config(), "pyproject is out of date: run `python -m fedpfn.core.config`"
    assert {k.replace("-", "_") for k in pyproject} == declared
    assert RunConfig.from_dict(pyproject).validated().to_dict() == RunConfig().validated().to_dict()


def test_every_algorithm_declares_a_name_and_its_parameters():
    for name, algorithm in {**CLIENT_RULES, **ANCHOR_METHODS}.items():
        assert algorithm.client.name == name
        assert dataclasses.is_dataclass(algorithm.client.Params)
        for f in dataclasses.fields(algorithm.client.Params):
            assert f.metadata["help"], f"{name}.{f.name} has no help"
    assert len(hparam_classes()) == len(set(hparam_classes()))


def test_a_hyperparameter_of_another_algorithm_is_refused_unless_default():
    from fedpfn.core.config import ConfigError

    with pytest.raises(ConfigError, match="prox_mu: 0.5 is set, but fedavg with server fedavg does not use it"):
        tiny_config(algorithm="fedavg", prox_mu=0.5)
    assert "prox_mu" not in tiny_config(algorithm="fedavg", prox_mu=0.01).to_dict()
    assert tiny_config(algorithm="fedprox", prox_mu=0.5).to_dict()["prox_mu"] == 0.5


def test_resolved_config_names_the_granularity():
    assert tiny_config(algorithm="fedpfn").to_dict()["anchor_granularity"] == "weight"
    assert tiny_config(algorithm="fedpnu").to_dict()["anchor_granularity"] == "neuron"


# --- boundaries -------------------------------------------------------------------------------


def test_clients_and_strategies_never_import_each_other():
    for path in python_files("clients"):
        assert not any(m.split(".")[0] == "strategies" for m in imported_modules(path)), path
    for path in python_files("strategies"):
        assert not any(m.split(".")[0] == "clients" for m in imported_modules(path)), path


MESSAGE_MODULES = ("app.py", "server.py", "transport.py", "algorithms.py")


def test_message_keys_are_written_only_in_the_protocol_module():
    """Keys such as 'server-round' nowhere else; plain record names ('arrays', 'config') not in
    the code that builds or reads messages (other modules may write JSON with such words)."""
    keys = {value for name, value in vars(protocol).items() if name.isupper() and isinstance(value, str)}
    offenders = []
    for path in python_files("clients", "strategies", "fedpfn"):
        if path.name == "protocol.py":
            continue
        handles_messages = path.parent.parent.name != "fedpfn" or path.name in MESSAGE_MODULES
        for node in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(node, ast.Constant) and node.value in keys):
                continue
            if "-" in node.value or handles_messages:
                offenders.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.value!r}")
    assert not offenders, offenders


def test_seeds_are_derived_only_in_the_seeding_module():
    """No RNG is seeded with a seed made on the spot (a hash, a list, a constant): seeds come
    from fedpfn.core.seeding, or are passed in by a caller that got them there."""
    offenders = []
    for path in python_files("clients", "strategies", "fedpfn"):
        if path.name == "seeding.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
                continue
            if node.func.attr not in ("default_rng", "SeedSequence", "manual_seed", "seed") or not node.args:
                continue
            argument = node.args[0]
            derived_here = isinstance(argument, ast.BinOp | ast.List | ast.Tuple | ast.Constant)
            if derived_here or (isinstance(argument, ast.Call) and "seed_for" not in ast.unparse(argument)):
                offenders.append(f"{path.relative_to(ROOT)}:{node.lineno} {ast.unparse(node)}")
    assert not offenders, offenders


def test_seed_streams_do_not_collide():
    """The earlier hash gave (round, 10_007) the seed of (round + 1, 0)."""
    from fedpfn.core.seeding import Stream, seed_for

    seen = {seed_for(3, Stream.DATA_ORDER, r, p) for r in (1, 2) for p in (0, 10_007)}
    assert len(seen) == 4
    assert seed_for(3, Stream.MASK, 1) != seed_for(3, Stream.DATA_ORDER, 1, 0)


# --- MOON against its paper ------------------------------------------------------------------


def test_moon_step_matches_the_papers_loss_on_a_tiny_case():
    """One SGD step of MOON's client equals w − lr·∇(CE + mu·l_con), l_con written out by hand."""
    from clients.base import local_round
    from clients.moon import PREVIOUS, MoonClient
    from clients.state import SAVED_IN
    from fedpfn.core.cache import client_indices, dataset_for, initial_model
    from fedpfn.runtime.server import train_config

    cfg = tiny_config(algorithm="moon", num_clients=1000, clients_per_round=2, momentum=0.0,
                      weight_decay=0.0, batch_size=100, moon_mu=2.0, moon_temperature=0.5)
    pid = 3
    x_idx = client_indices(cfg)[pid]
    assert len(x_idx) <= cfg.batch_size  # one step
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
        want = (p - cfg.lr * p.grad).detach().numpy()
        np.testing.assert_allclose(trained[name], want, rtol=1e-4, atol=1e-6, err_msg=name)
    assert not np.allclose(trained["features.1.weight"], _fedavg_step(cfg, pid, global_model)["features.1.weight"])


def _fedavg_step(cfg, pid, model):
    from clients.base import FedAvgClient, local_round
    from fedpfn.runtime.server import train_config

    content = RecordDict({"arrays": ArrayRecord(model.state_dict()), "config": train_config(cfg, 2)})
    return protocol.to_numpy(local_round([FedAvgClient], cfg, pid, RecordDict(), torch.device("cpu"), content)["arrays"])


def test_no_function_in_the_core_is_longer_than_60_lines():
    long = []
    for path in python_files("fedpfn", "clients", "strategies", "partitions"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.end_lineno - node.lineno >= 60:
                long.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name}")
    assert not long, long
