"""One path for a round's result: every grid gives the round's totals with its replies, and whether
the replies carry the clients' models is an argument of the grid call, never a message key.

A plain Flower Grid (the Ray engine's, a deployment's) takes the totals of the replies
(transport.PlainGrid, RoundTotals.of_replies); the batched engine's grid takes them where its
clients trained. The server aggregates a mean-based strategy's round from those totals, any
other strategy's from the replies (ServerLoop.from_totals); it asks for the models
(`need_models`) when it reads them: a round that measures alignment, a strategy that is not
mean-based.
"""

from __future__ import annotations

import pytest
import torch
from flwr.app import ArrayRecord

from fedpfn.core import protocol
from fedpfn.core.cache import initial_model
from fedpfn.runtime.algorithms import build_strategy
from fedpfn.runtime.engines.runner import CohortRunner
from fedpfn.runtime.client_app import client_app
from fedpfn.runtime.engines.grid import FIRST_NODE, BatchedGrid, act_as_server
from fedpfn.runtime.server import train_config, with_accepted_round
from fedpfn.runtime.simulation import simulate
from fedpfn.runtime.transport import PlainGrid
from strategies import SampledGrid
from tests.support.config import tiny_config

PARTITIONS = (0, 2, 3)


def round_messages(cfg, grid: BatchedGrid) -> tuple[dict, list[str]]:
    """Round 1's train messages to PARTITIONS, by partition id, as the server loop builds them; the
    model's parameter names."""
    model = initial_model(cfg)
    strategy = build_strategy(cfg, model)
    view = SampledGrid(grid, [FIRST_NODE + p for p in PARTITIONS])
    messages = strategy.configure_train(1, ArrayRecord(model.state_dict()), train_config(cfg, 1), view)
    by_partition = {m.metadata.dst_node_id - FIRST_NODE: with_accepted_round(m, 0) for m in messages}
    return by_partition, [name for name, _ in model.named_parameters()]


def same_stacks(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return sorted(a) == sorted(b) and all(torch.equal(a[n], b[n]) for n in a)


@pytest.mark.parametrize(
    "algorithm,model", [("fedavg", "mlp"), ("scaffold", "mlp"), pytest.param("fedavg", "resnet20", marks=pytest.mark.slow)]
)  # ResNet-20: BatchNorm buffers and counters
def test_a_plain_grid_gives_the_totals_the_batched_grid_takes_where_its_clients_trained(algorithm, model):
    """The same round on two fresh federations: through PlainGrid (replies with arrays, totals taken
    of them) and through the batched grid's own train_round (totals from its program)."""
    act_as_server()
    cfg = tiny_config(algorithm=algorithm, model=model, num_clients=1000, batch_size=30, engine="batched",
                      engine_mode="loop")  # fmt: skip
    batched = BatchedGrid(cfg, CohortRunner(cfg), client_app)
    messages, _ = round_messages(cfg, batched)
    own = batched.train_round(messages, None, need_models=False)
    plain_grid = BatchedGrid(cfg, CohortRunner(cfg), client_app)  # answers pushed messages as a Flower Grid does
    messages, names = round_messages(cfg, plain_grid)
    plain = PlainGrid(plain_grid, names).train_round(messages, None, need_models=False)

    assert sorted(own.replies) == sorted(plain.replies) == list(PARTITIONS) and not own.failed and not plain.failed
    assert all(protocol.ARRAYS not in r.content.array_records for r in own.replies.values())  # totals alone
    assert all(protocol.ARRAYS in r.content.array_records for r in plain.replies.values())
    assert own.totals.replies == plain.totals.replies == len(PARTITIONS)
    untimed = lambda totals: {k: v for k, v in totals.metrics.items() if k != protocol.TRAIN_SECONDS}  # noqa: E731
    assert own.totals.examples == plain.totals.examples and untimed(own.totals) == untimed(plain.totals)
    assert same_stacks(own.totals.params, plain.totals.params) and same_stacks(own.totals.buffers, plain.totals.buffers)
    assert sorted(own.totals.records) == sorted(plain.totals.records)
    assert all(same_stacks(own.totals.records[k], plain.totals.records[k]) for k in own.totals.records)
    if algorithm == "scaffold":
        assert own.totals.records  # the control variates' changes are totalled too


def test_the_batched_grid_sends_the_models_when_asked_and_the_totals_always():
    act_as_server()
    cfg = tiny_config(num_clients=1000, engine="batched", engine_mode="loop")
    grid = BatchedGrid(cfg, CohortRunner(cfg), client_app)
    messages, _ = round_messages(cfg, grid)
    got = grid.train_round(messages, None, need_models=True)
    assert all(protocol.ARRAYS in r.content.array_records for r in got.replies.values())
    assert got.totals.replies == len(PARTITIONS) and set(got.totals.params) == set(messages[0].content[protocol.ARRAYS])


def test_no_message_carries_a_reply_kind_and_the_server_asks_for_models_when_it_reads_them(tmp_path, monkeypatch):
    """FedAvg: models only in the round that measures alignment (2); a robust strategy (FedMedian,
    not mean-based): every round. No train message says which (protocol.FULL_REPLY is gone)."""
    asked: list[tuple[str, bool]] = []
    keys: set[str] = set()
    train_round = BatchedGrid.train_round

    def spy(self, messages, timeout, need_models):
        keys.update(k for m in messages.values() for k in m.content.config_records[protocol.CONFIG])
        got = train_round(self, messages, timeout, need_models)
        asked.append((self.cfg.server, all(protocol.ARRAYS in r.content.array_records for r in got.replies.values())))
        return got

    monkeypatch.setattr(BatchedGrid, "train_round", spy)
    median = "flwr.serverapp.strategy:FedMedian"
    simulate(tiny_config(engine="batched", num_clients=1000, rounds=2, alignment_every=2, alignment_clients=2,
                         alignment_samples=300, out=str(tmp_path / "fedavg")), show_progress=False)  # fmt: skip
    simulate(tiny_config(engine="batched", num_clients=1000, rounds=1, server=median, out=str(tmp_path / "median")),
             show_progress=False)  # fmt: skip
    assert asked == [("fedavg", False), ("fedavg", True), (median, True)]
    assert not hasattr(protocol, "FULL_REPLY") and not any("full" in key for key in keys)
    assert {protocol.SERVER_ROUND, protocol.ACCEPTED_ROUND} <= keys


def test_a_mean_based_round_aggregates_every_reply_and_flower_does_not_say_received_1(caplog):
    """`flwr run` printed Flower's "aggregate_train: Received 1 results" for 2 clients: the inner
    strategy is handed the round's mean as one reply (strategies.composed, guarantee 3), no reply
    is lost; Flower's count of that one reply is not shown (issue 56)."""
    import logging

    from fedpfn.core.flower_notes import FLOWER_LOGGER, ONE_MERGED_REPLY

    act_as_server()
    cfg = tiny_config(num_clients=1000, engine="batched", engine_mode="loop")
    grid = BatchedGrid(cfg, CohortRunner(cfg), client_app)
    strategy = build_strategy(cfg, initial_model(cfg))
    view = SampledGrid(grid, [FIRST_NODE + p for p in PARTITIONS])
    messages = strategy.configure_train(1, ArrayRecord(initial_model(cfg).state_dict()), train_config(cfg, 1), view)
    names = [name for name, _ in initial_model(cfg).named_parameters()]
    plain = PlainGrid(grid, names).train_round({m.metadata.dst_node_id - FIRST_NODE: with_accepted_round(m, 0)
                                                for m in messages}, None, need_models=True)  # fmt: skip
    flower = logging.getLogger(FLOWER_LOGGER)
    level, propagate = flower.level, flower.propagate
    flower.propagate = True  # Flower's console aside, caplog sees its records
    flower.setLevel(logging.INFO)
    try:
        strategy.aggregate_totals(1, plain.totals, list(plain.replies.values()))
        assert plain.totals.replies == len(PARTITIONS) and ONE_MERGED_REPLY not in caplog.text
        strategy.inner.aggregate_train(1, list(plain.replies.values())[:1])  # Flower's wording, still what is dropped
        assert ONE_MERGED_REPLY in caplog.text
    finally:
        flower.setLevel(level)
        flower.propagate = propagate
