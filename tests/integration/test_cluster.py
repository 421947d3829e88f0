"""The engines on a real two-node Ray cluster, and the placement's one-line refusals.

`ray.cluster_utils.Cluster` starts a head and a worker node on this machine, each with its
own raylet and 1 CPU: the batched engine joins it as it would a cluster of machines
(`--ray-address`), places one actor per node, and must give one machine's numbers. Where an
actor ran is what Ray says (its runtime context's node id), read from the engine's log.
The planning rules themselves are checked as plain functions on described nodes.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import ray
from ray.cluster_utils import Cluster

import run_sim
from fedpfn.core.files import CLIENTS, METRICS, read_jsonl
from fedpfn.core.settings import ConfigError
from fedpfn.runtime.engines.placement import Node, plan_actors, ray_env_problem
from fedpfn.runtime.simulation import simulate
from tests.support.config import tiny_config

TIMING = {"seconds", "train_seconds", "round_seconds"}
# 40 clients of 1,500 images, 4 a round, 3 steps each: seconds, not minutes, on 2 shared cores
SMALL = {"num_clients": 40, "clients_per_round": 4, "rounds": 2, "batch_size": 500, "engine": "batched"}


@pytest.fixture(scope="module")
def cluster():
    """A head and one worker node, 1 CPU each, for the whole module; left as found."""
    two_nodes = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    two_nodes.add_node(num_cpus=1)
    two_nodes.wait_for_nodes()
    yield two_nodes
    ray.shutdown()
    two_nodes.shutdown()


def rows(folder: Path, name: str) -> list[dict]:
    return [{k: v for k, v in row.items() if k not in TIMING} for row in read_jsonl(folder / name)]


@pytest.mark.slow  # about 25 s idle (Ray's actors start and load the data), 90 s at load average 8
def test_the_batched_engine_over_two_nodes_equals_one_machine(cluster, tmp_path, caplog):
    """SCAFFOLD (client state that must travel with its job) in threads mode: the cluster's
    run gives the in-process run's metrics and clients rows bit for bit, and every round
    both nodes trained some of its clients."""
    common = dict(algorithm="scaffold", engine_mode="threads", **SMALL)
    here, there = tmp_path / "here", tmp_path / "there"
    simulate(tiny_config(out=str(here), **common), show_progress=False)
    caplog.set_level(logging.DEBUG, logger="fedpfn.engines")
    simulate(tiny_config(out=str(there), ray_address=cluster.address, **common), show_progress=False)
    assert rows(there, METRICS) == rows(here, METRICS)
    assert rows(there, CLIENTS) == rows(here, CLIENTS)
    assert sorted(p.relative_to(here) for p in here.rglob("*.npz") if "client_state" in p.parts) == sorted(
        p.relative_to(there) for p in there.rglob("*.npz") if "client_state" in p.parts
    )
    nodes = {node.node_id for node in cluster.list_all_nodes()}
    trained = [r.args[1] for r in caplog.records if r.getMessage().startswith("clients ")]
    assert len(nodes) == 2 and len(trained) == 2 * 2  # two rounds, one part per node each
    assert set(trained[:2]) == set(trained[2:]) == nodes


def test_a_request_the_cluster_cannot_meet_is_refused_in_one_line(cluster, tmp_path, capsys):
    """A GPU on a CPU cluster (batched), a client of 2 CPUs on nodes of 1 (Ray): one line, exit
    2, nothing written, and nothing waited on."""
    cases = [
        (["--engine", "batched", "--client-gpus", "1"], "client_gpus: 1 asks for a GPU, but the Ray cluster at"),
        (["--engine", "ray", "--client-cpus", "2"], "client_cpus, client_gpus: a client needs 2 CPU on one node"),
    ]
    for flags, start in cases:
        out = tmp_path / flags[1]
        args = [*flags, "--ray-address", cluster.address, "--num-clients", "4", "--clients-per-round", "2", "--out", str(out)]
        assert run_sim.main(args) == 2
        lines = capsys.readouterr().err.splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"error: {start}"), lines
        assert "has 2 node(s)" in lines[0] and "(1 CPU, 0 GPU)" in lines[0]
        assert not out.exists()
        assert not ray.is_initialized()


@pytest.mark.parametrize("flags", [["--engine", "ray"], ["--engine-workers", "1"]])
def test_ray_address_in_the_environment_is_refused_before_the_folder(flags, tmp_path, capsys, monkeypatch):
    """RAY_ADDRESS would send `ray.init` to a cluster config.json does not name (here one that is
    not there): one line naming it, exit 2, no run folder."""
    monkeypatch.setenv("RAY_ADDRESS", "127.0.0.1:1")
    out = tmp_path / "run"
    assert run_sim.main([*flags, "--num-clients", "4", "--clients-per-round", "2", "--out", str(out)]) == 2
    assert capsys.readouterr().err.splitlines() == [
        "error: RAY_ADDRESS='127.0.0.1:1' is set in the environment: Ray would join that cluster instead of starting "
        + "here; pass --ray-address 127.0.0.1:1 to run on it, or unset RAY_ADDRESS"
    ]
    assert not out.exists()


def nodes(*resources: tuple[int, int]) -> list[Node]:
    return [Node(f"n{i}", f"10.0.0.{i}", cpus, gpus) for i, (cpus, gpus) in enumerate(resources)]


def placed(found: list[Node], **settings) -> list[tuple[str, int, int]]:
    cfg = tiny_config(**settings)  # as typed: engine_workers lives in the engine's variant
    return [(slot.node.address, slot.cpus, slot.gpus) for slot in plan_actors(found, cfg, "the cluster")]


def test_actors_go_one_per_gpu_else_one_per_node_with_its_cpus():
    assert placed(nodes((8, 2), (4, 1))) == [("10.0.0.0", 4, 1), ("10.0.0.1", 4, 1), ("10.0.0.0", 4, 1)]
    assert placed(nodes((8, 2), (4, 1)), engine_workers=2) == [("10.0.0.0", 4, 1), ("10.0.0.1", 4, 1)]
    assert placed(nodes((8, 2), (4, 1)), client_gpus=0.0) == [("10.0.0.0", 8, 0), ("10.0.0.1", 4, 0)]
    assert placed(nodes((0, 0), (3, 0), (2, 0))) == [("10.0.0.1", 3, 0), ("10.0.0.2", 2, 0)]
    # --engine-workers spread over the nodes first, each node's CPUs split among its actors
    assert placed(nodes((3, 0), (2, 0)), engine_workers=3) == [("10.0.0.0", 1, 0), ("10.0.0.1", 2, 0), ("10.0.0.0", 1, 0)]


@pytest.mark.parametrize(
    "found, settings, message",
    [
        (((1, 0), (1, 0)), {"client_gpus": 1.0}, "client_gpus: 1 asks for a GPU, but the cluster has 2 node(s): "
         + "10.0.0.0 node n0 (1 CPU, 0 GPU), 10.0.0.1 node n1 (1 CPU, 0 GPU)"),
        (((1, 0), (1, 0)), {"engine_workers": 3}, "engine_workers: 3 actors need a CPU each, but the cluster has 2 node(s)"),
        (((4, 1),), {"engine_workers": 2}, "engine_workers: 2 actors need a GPU each, but the cluster has 1 node(s)"),
        (((0, 0),), {}, "the batched engine's actors need a CPU each, but the cluster has 1 node(s)"),
    ],
)  # fmt: skip
def test_a_plan_the_nodes_cannot_hold_is_refused_naming_what_is_there(found, settings, message):
    with pytest.raises(ConfigError) as refused:
        placed(nodes(*found), **settings)
    assert str(refused.value).startswith(message)


def test_ray_address_in_the_environment_passes_only_where_it_names_the_cluster_asked_for(monkeypatch):
    monkeypatch.setenv("RAY_ADDRESS", "10.0.0.1:6379")
    assert ray_env_problem(tiny_config(ray_address="10.0.0.1:6379")) is None
    assert ray_env_problem(tiny_config(ray_address="auto")) is None  # Ray reads 'auto' as RAY_ADDRESS
    assert ray_env_problem(tiny_config(ray_address="10.0.0.2:6379")) == (
        "ray_address: '10.0.0.2:6379' but RAY_ADDRESS='10.0.0.1:6379' in the environment; unset one of them"
    )
    monkeypatch.delenv("RAY_ADDRESS")
    assert ray_env_problem(tiny_config()) is None
