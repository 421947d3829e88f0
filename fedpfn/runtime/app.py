"""The Flower app: one ClientApp and one ServerApp, for simulation and deployment alike.

`flwr run .` loads `client_app` and `server_app` from here (see pyproject's
`[tool.flwr.app]`); `run_sim.py` uses the same ClientApp with a ServerApp built around
an already validated config.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Mapping
from functools import lru_cache
from typing import Any

import torch
from flwr.app import ConfigRecord, Context, Message, RecordDict
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid, ServerApp

from clients import local_round
from fedpfn.core import protocol
from fedpfn.core.config import PLACEMENT, TRACKERS, RunConfig
from fedpfn.core.seeding import Stream, numpy_rng
from fedpfn.core.training import pick_device
from fedpfn.runtime import env, nodedata
from fedpfn.runtime.algorithms import client_rules, config_from_json, load_config, parse_config
from fedpfn.runtime.lifecycle import RunPlan, claimed, plan, serve, tracking
from fedpfn.runtime.resources import client_wants_gpu
from fedpfn.runtime.runfolder import RunFolder
from fedpfn.runtime.server import FederationError
from fedpfn.runtime.tracking import Tracking, check_available

# The switches this process found unset: set now for what it starts, but its own Flower read them
# when it was imported, before this module (under `flwr run`); deployed_main says so.
DEFAULTED = env.flower_defaults()
SIMULATED_NODES_SECONDS = 10.0  # a simulation registers its nodes as its ServerApp starts
log = logging.getLogger("fedpfn")


class SimulatedFailure(RuntimeError):
    """Raised on purpose by `--simulate-failures` to exercise the server's fault handling."""


@lru_cache(maxsize=8)
def _config(config_json: str) -> RunConfig:
    return config_from_json(config_json)


def fails_this_round(cfg: RunConfig, server_round: int, partition_id: int) -> bool:
    """Seeded, so a rerun (or a resumed run) sees the same failures."""
    if cfg.simulate_failures <= 0:
        return False
    return bool(numpy_rng(cfg.seed, Stream.FAILURES, server_round, partition_id).random() < cfg.simulate_failures)


client_app = ClientApp()


def test_delay(node_config: Mapping[str, Any], server_round: int) -> float:
    """Seconds a node sleeps before it trains: the deploy tests' slow node, off by default.

    Node-config test knobs: `test-delay-s=S`, and `test-delay-rounds="1,3"` to sleep only then.
    """
    seconds = float(node_config.get("test-delay-s", 0))
    rounds = str(node_config.get("test-delay-rounds", "")).replace(",", " ").split()
    return seconds if not rounds or str(server_round) in rounds else 0.0


def node_view(cfg: RunConfig, node_config: Mapping[str, Any]) -> RunConfig:
    """The run's settings as this node applies them: with its own `data-root` if it has one.

    The run's data-root is a path on the server's machine; a SuperNode keeps its data where
    its machine has it (`--node-config 'data-root="/srv/data"'`).
    """
    root = node_config.get("data-root")
    return cfg if root is None else dataclasses.replace(cfg, data_root=str(root))


@client_app.train()
def train(msg: Message, context: Context) -> Message:
    config = msg.content.config_records[protocol.CONFIG]
    cfg = node_view(_config(str(config[protocol.RUN_CONFIG])), context.node_config)
    partition_id = int(context.node_config[protocol.PARTITION_ID])
    server_round = int(config[protocol.SERVER_ROUND])
    if fails_this_round(cfg, server_round, partition_id):
        raise SimulatedFailure(f"client {partition_id} failed in round {server_round} (simulated)")
    time.sleep(test_delay(context.node_config, server_round))
    torch.set_num_threads(max(1, int(cfg.client_cpus)))
    device = pick_device(want_gpu=client_wants_gpu(cfg.client_gpus))
    data = nodedata.for_node(cfg, partition_id, context.node_config)  # deployed: the node's own copy
    state_root = nodedata.state_root(cfg, context.node_config)
    content = local_round(
        client_rules(cfg), cfg, partition_id, context.state, device, msg.content, data=data, state_root=state_root
    )
    return Message(content=content, reply_to=msg)


@client_app.query()
def query(msg: Message, context: Context) -> Message:
    """Tell the server which partition this node holds (it only knows node ids), and of how many."""
    config = context.node_config
    node = ConfigRecord({protocol.PARTITION_ID: int(config[protocol.PARTITION_ID])})
    if protocol.NUM_PARTITIONS in config:
        node[protocol.NUM_PARTITIONS] = int(config[protocol.NUM_PARTITIONS])
    return Message(content=RecordDict({protocol.NODE: node}), reply_to=msg)


def make_server_app(run: RunPlan, tracker: Tracking | None = None) -> ServerApp:
    """A ServerApp for a run checked and claimed by the caller (run_sim.py's engines)."""
    app = ServerApp()

    @app.main()
    def main(grid: Grid, context: Context) -> None:
        serve(grid, run, tracker)

    return app


server_app = ServerApp()


@server_app.main()
def deployed_main(grid: Grid, context: Context) -> None:
    """`flwr run`: settings come from `[tool.flwr.app.config]` and `--run-config`.

    An unfinished run of the same settings in `out` is resumed from its checkpoint; a
    finished one, or one of other settings, is refused unless `overwrite=true`. Errors are
    raised, so that Flower shows them as the run's status (`flwr ls`).
    """
    problem = env.runtime_env_problem()
    if problem is not None:
        raise RuntimeError(problem)
    cfg = load_config(dict(context.run_config))
    check_simulated_nodes(grid, cfg.num_clients)
    cfg = dataclasses.replace(cfg, out=str(cfg.run_dir.resolve()))  # relative: to the SuperLink's folder
    run = plan(cfg, resume=resumes_in_place(cfg))
    check_available(cfg)
    with claimed(run, "deployment"), tracking(run, "deployment: clients train on the SuperNodes") as tracker:
        if "FLWR_TELEMETRY_ENABLED" in DEFAULTED:
            log.warning(
                "Flower's telemetry is on in this SuperLink's processes (started without "
                "FLWR_TELEMETRY_ENABLED=0); start it from a shell that ran . .venv/bin/activate to turn it off"
            )
        serve(grid, run, tracker)


def check_simulated_nodes(grid: Grid, num_clients: int) -> None:
    """Under a simulation SuperLink every node exists from the start: refuse another count at once.

    Flower numbers its simulated nodes' partitions 0..num-supernodes-1 (default 2), so with
    another count than num-clients the run could not be what was asked; found here, before the
    run folder is touched, rather than after Ray started and the nodes answered. A deployment's
    nodes connect over time, so its grid is left to the server loop's wait.
    """
    from flwr.superlink.grid.inmemory_grid import InMemoryGrid  # the grid of Flower's simulation

    if not isinstance(grid, InMemoryGrid):
        return
    deadline, seen = time.monotonic() + SIMULATED_NODES_SECONDS, -1
    while (nodes := list(grid.get_node_ids())) or time.monotonic() < deadline:
        if nodes and len(nodes) == seen:  # the same count twice: registration is over
            break
        seen = len(nodes)
        time.sleep(0.25)
    if len(nodes) != num_clients:
        raise FederationError(
            f"num-clients is {num_clients} but this simulation has {len(nodes)} SuperNodes (Flower's default "
            f'is 2): run it with --federation-config "num-supernodes={num_clients}", or set '
            f"num-clients={len(nodes)} in --run-config"
        )


def resumes_in_place(cfg: RunConfig) -> bool:
    """Whether `flwr run` continues the run in `out`: unfinished, of the same settings, no overwrite."""
    folder = RunFolder(cfg.run_dir)
    if not folder.holds_run() or cfg.overwrite:
        return False
    if folder.is_finished():
        raise RuntimeError(
            f"out: '{folder.path}' holds a finished run; set overwrite=true in --run-config to replace it, "
            "or another out"
        )
    stored = parse_config(folder.read_config())
    differences = cfg.differences(stored, ignore=("out", "overwrite", *PLACEMENT, *TRACKERS))
    if differences:
        raise RuntimeError(
            f"out: '{folder.path}' holds a run of other settings ({'; '.join(differences)}); "
            "set another out, or overwrite=true in --run-config to replace it"
        )
    return True
