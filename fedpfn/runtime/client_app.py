"""The Flower ClientApp: one client's round from its train message, for simulation (Ray) and
deployment (SuperNodes) alike; the batched engine answers other messages with it too."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping
from functools import lru_cache
from pathlib import Path
from typing import Any

import torch
from flwr.app import ConfigRecord, Context, Message, RecordDict
from flwr.clientapp import ClientApp

from fedpfn.core import protocol
from fedpfn.core.cache import ClientData
from fedpfn.core.config import RunConfig
from fedpfn.core.training import pick_device, torch_threads
from fedpfn.core.user_code import within
from fedpfn.runtime import nodedata
from fedpfn.runtime.algorithms import client_rules, config_from_json
from fedpfn.runtime.client_mods import run_with_mod
from fedpfn.runtime.engines.program import local_round
from fedpfn.runtime.engines.ray_start import enter_driver_folder
from fedpfn.runtime.federated_eval import evaluate_client
from fedpfn.runtime.plugins import client_mod_of
from strategies.wrapping import plugins_of
from fedpfn.runtime.resources import client_wants_gpu


@lru_cache(maxsize=8)
def _config(config_json: str) -> RunConfig:
    return config_from_json(config_json)


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
    return cfg if root is None else dataclasses.replace(cfg, task=dataclasses.replace(cfg.task, data_root=str(root)))


def node_setup(msg: Message, context: Context) -> tuple[RunConfig, int, torch.device, ClientData | None, Path | None]:
    """What this node works with for `msg`: the run's settings as it applies them, its partition,
    its device, its data (deployed: the node's own copy) and the folder of its clients' state."""
    enter_driver_folder()
    config = msg.content.config_records[protocol.CONFIG]
    cfg = node_view(_config(str(config[protocol.RUN_CONFIG])), context.node_config)
    partition_id = int(context.node_config[protocol.PARTITION_ID])
    device = pick_device(want_gpu=client_wants_gpu(cfg.placement.client_gpus))
    data = nodedata.for_node(cfg, partition_id, context.node_config)
    return cfg, partition_id, device, data, nodedata.state_root(cfg, context.node_config)


@client_app.train()
def train(msg: Message, context: Context) -> Message:
    """One client's round (inside the run's mod, if any), bounded by the round's timeout: a call
    that never returns (a mod or rule that hangs) frees its worker by then, so the simulation ends
    with the run instead of waiting for it (the server stopped waiting at its deadline)."""
    cfg, partition_id, device, data, state_root = node_setup(msg, context)
    server_round = int(msg.content.config_records[protocol.CONFIG][protocol.SERVER_ROUND])
    time.sleep(test_delay(context.node_config, server_round))
    torch.set_num_threads(max(1, int(cfg.placement.client_cpus)))

    def round_of(message: Message) -> Message:  # the rule's round; a --client-mod runs around it
        content = local_round(
            client_rules(cfg), cfg, partition_id, context.state, device, message.content, data=data,
            state_root=state_root,
        )  # fmt: skip
        return Message(content=content, reply_to=message)

    mod, bound = client_mod_of(cfg), cfg.federation.round_timeout or None
    if mod is None:
        return within(bound, f"partition {partition_id}'s round {server_round}", round_of, msg)
    what = f"client_mod: {plugins_of(cfg).client_mod} in partition {partition_id}'s round {server_round}"
    return within(bound, what, run_with_mod, mod, cfg.seed, partition_id, msg, context, round_of)


@client_app.evaluate()
def evaluate(msg: Message, context: Context) -> Message:
    """`--evaluate-clients`: the global model (and this client's own) on its local test split."""
    cfg, partition_id, device, data, state_root = node_setup(msg, context)
    with torch_threads(1):  # float sums depend on the thread count: one, on every engine
        metrics = evaluate_client(cfg, partition_id, msg.content, context.state, device, data, state_root)
    return Message(content=RecordDict({protocol.METRICS: metrics}), reply_to=msg)


@client_app.query()
def query(msg: Message, context: Context) -> Message:
    """Tell the server which partition this node holds (it only knows node ids), and of how many."""
    config = context.node_config
    node = ConfigRecord({protocol.PARTITION_ID: int(config[protocol.PARTITION_ID])})
    if protocol.NUM_PARTITIONS in config:
        node[protocol.NUM_PARTITIONS] = int(config[protocol.NUM_PARTITIONS])
    return Message(content=RecordDict({protocol.NODE: node}), reply_to=msg)


