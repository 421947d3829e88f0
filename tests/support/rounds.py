"""One federated round driven in-process: the real strategies, clients and Flower messages;
only the transport (Ray or gRPC) is left out."""

from __future__ import annotations

import pytest
import torch
from flwr.app import ArrayRecord, Message, RecordDict

from fedpfn.core.config import RunConfig

class NodeGrid:
    """Stands in for a grid only as far as a strategy asks it for node ids."""

    def __init__(self, node_ids: list[int]) -> None:
        self.node_ids = node_ids

    def get_node_ids(self) -> list[int]:
        return list(self.node_ids)


def client_replies(cfg: RunConfig, strategy, arrays: ArrayRecord, server_round: int, states=None) -> list[Message]:
    """configure_train, then each sampled client's fit, with real messages (node id == partition id).

    `states` keeps each client's context.state across calls. Replies come sorted by partition.
    """
    from fedpfn.runtime.algorithms import client_rules
    from fedpfn.runtime.engines.program import local_round
    from fedpfn.runtime.server import train_config, with_accepted_round
    from strategies import sample_clients

    states = {} if states is None else states
    chosen = sample_clients(cfg.seed, server_round, cfg.federation.num_clients, cfg.federation.clients_per_round)
    messages = strategy.configure_train(server_round, arrays, train_config(cfg, server_round), NodeGrid(chosen))
    replies = []
    for message in messages:
        pid = message.metadata.dst_node_id
        content = with_accepted_round(message, server_round - 1).content  # every earlier reply was taken
        state = states.setdefault(pid, RecordDict())
        content = local_round(client_rules(cfg), cfg, pid, state, torch.device("cpu"), content)
        replies.append(Message(content=content, reply_to=message))
    return sorted(replies, key=lambda r: int(r.content.metric_records["metrics"]["partition-id"]))


def first_fast(cases: list[tuple]) -> list:
    """A costly model family's cases (ResNet-20's) as pytest params, all but the first marked `slow`:
    `-m "not slow"` still trains that family once; `make test` runs them all."""
    return [pytest.param(*case, marks=() if i == 0 else pytest.mark.slow) for i, case in enumerate(cases)]


def run_round(cfg: RunConfig, strategy, arrays: ArrayRecord, server_round: int, states=None):
    """One whole round in-process: `client_replies`, then aggregate_train.

    Returns (new arrays, train metrics, replies as the inner strategy saw them, bytes
    uploaded as sent).
    """
    from fedpfn.core.protocol import arrays_bytes

    replies = client_replies(cfg, strategy, arrays, server_round, states)
    bytes_up = sum(arrays_bytes(r.content) for r in replies)
    new_arrays, metrics = strategy.aggregate_train(server_round, replies)
    return new_arrays, metrics, replies, bytes_up
