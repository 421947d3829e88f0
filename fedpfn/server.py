"""The server's round loop: sample, send, aggregate, evaluate, record, checkpoint.

Flower's `Strategy.start` runs a loop too; this one adds what a research simulator needs
around the same strategy hooks: seeded sampling over partition ids, failed replies
counted and tolerated, communication measured, metrics flushed per round, checkpoints
and resume. Any Flower strategy still does the aggregation.
"""

from __future__ import annotations

import logging
import pickle
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from flwr.app import ArrayRecord, ConfigRecord, Message, MessageType, RecordDict
from flwr.serverapp import Grid
from flwr.serverapp.strategy import Strategy
from rich.console import Console

from fedpfn.config import RunConfig
from fedpfn.records import arrays_bytes, to_array_record
from fedpfn.results import RunFolder
from fedpfn.training import evaluate, pick_device
from fedpfn.workspace import dataset_on, initial_model, partition_label_counts
from strategies import SampledGrid, build_strategy, sample_clients

log = logging.getLogger("fedpfn")

NODE_WAIT_SECONDS = 600.0


class FederationError(RuntimeError):
    """The federation cannot go on (nodes missing, inconsistent partitions)."""


def round_config(cfg: RunConfig, server_round: int, resumed_from: int = 0) -> ConfigRecord:
    """What every client needs for one round; the config travels so clients need no files.

    `resumed-from` tells clients whose in-memory state was lost which checkpoint to load.
    """
    return ConfigRecord(
        {
            "server-round": server_round,
            "lr": cfg.lr_at(server_round),
            "resumed-from": resumed_from,
            "run-config": cfg.to_json(),
        }
    )


def discover_partitions(grid: Grid, num_clients: int) -> dict[int, int]:
    """partition id -> node id, asking each node once; waits for nodes to connect."""
    deadline = time.monotonic() + NODE_WAIT_SECONDS
    while len(node_ids := list(grid.get_node_ids())) < num_clients:
        if time.monotonic() > deadline:
            raise FederationError(
                f"only {len(node_ids)} of {num_clients} nodes connected within "
                f"{NODE_WAIT_SECONDS:.0f} s; start more SuperNodes or lower num_clients"
            )
        time.sleep(1.0)
    queries = [
        Message(content=RecordDict(), dst_node_id=node_id, message_type=MessageType.QUERY)
        for node_id in node_ids
    ]
    mapping: dict[int, int] = {}
    for reply in grid.send_and_receive(queries, timeout=NODE_WAIT_SECONDS):
        if reply.has_error():
            raise FederationError(f"node {reply.metadata.src_node_id} failed: {reply.error.reason}")
        partition_id = int(reply.content.config_records["node"]["partition-id"])
        mapping[partition_id] = reply.metadata.src_node_id
    missing = sorted(set(range(num_clients)) - set(mapping))
    if missing:
        raise FederationError(
            f"no node holds partition(s) {missing[:10]}; each partition-id in 0..{num_clients - 1} "
            "needs exactly one SuperNode"
        )
    return mapping


def strategy_state(strategy: Strategy) -> bytes:
    """Everything a strategy (and the strategies it wraps) holds that can be pickled."""
    state: dict[str, Any] = {}
    for key, value in vars(strategy).items():
        if isinstance(value, Strategy):
            state[key] = ("strategy", strategy_state(value))
            continue
        try:
            state[key] = ("value", pickle.dumps(value))
        except (pickle.PicklingError, TypeError, AttributeError):
            continue  # callables such as metric aggregation functions stay as built
    return pickle.dumps(state)


def load_strategy_state(strategy: Strategy, blob: bytes) -> None:
    for key, (kind, value) in pickle.loads(blob).items():
        if kind == "strategy":
            load_strategy_state(getattr(strategy, key), value)
        else:
            setattr(strategy, key, pickle.loads(value))


@dataclass
class RoundResult:
    arrays: ArrayRecord
    record: dict[str, Any]


class Federation:
    """The state of one run on the server side."""

    def __init__(self, grid: Grid, cfg: RunConfig, folder: RunFolder) -> None:
        self.grid = grid
        self.cfg = cfg
        self.folder = folder
        self.device = pick_device(want_gpu=cfg.client_gpus > 0 or torch.cuda.is_available())
        self.model = initial_model(cfg).to(self.device)
        self.strategy = build_strategy(cfg, self.model)  # the mask reads names and shapes only
        self.test = dataset_on(cfg, self.device)
        self.arrays = ArrayRecord(self.model.state_dict())
        self.next_round = 1
        self.resumed_from = 0

    # --- one round -----------------------------------------------------------------------

    def train_round(self, server_round: int, nodes: dict[int, int]) -> dict[str, Any]:
        cfg = self.cfg
        chosen = sample_clients(cfg.seed, server_round, cfg.num_clients, cfg.clients_per_round)
        view = SampledGrid(self.grid, [nodes[p] for p in chosen])
        messages = list(
            self.strategy.configure_train(
                server_round, self.arrays, round_config(cfg, server_round, self.resumed_from), view
            )
        )
        bytes_down = sum(arrays_bytes(m.content) for m in messages)
        replies = list(self.grid.send_and_receive(messages))
        good = sorted(
            (r for r in replies if not r.has_error()),
            key=lambda r: int(r.content.metric_records["metrics"]["partition-id"]),
        )
        failures = len(messages) - len(good)
        for reply in replies:
            if reply.has_error():
                log.warning("round %d: a client failed: %s", server_round, reply.error.reason)
        bytes_up = sum(arrays_bytes(r.content) for r in good)
        train_loss = float("nan")
        if len(good) >= cfg.min_replies:
            arrays, metrics = self.strategy.aggregate_train(server_round, good)
            if arrays is not None:
                self.arrays = arrays
            if metrics is not None:
                train_loss = float(metrics["train-loss"])
        else:
            log.warning(
                "round %d skipped: %d successful replies < min_replies %d; global model kept",
                server_round,
                len(good),
                cfg.min_replies,
            )
        return {
            "num_clients": len(good),
            "num_failures": failures,
            "clients": chosen,
            "train_loss": train_loss,
            "bytes_down": bytes_down,
            "bytes_up": bytes_up,
            "skipped": len(good) < cfg.min_replies,
        }

    def evaluate_global(self) -> tuple[float, float]:
        self.model.load_state_dict(self.arrays.to_torch_state_dict())
        return evaluate(self.model, self.test.test_x, self.test.test_y)

    def write_partition_report(self) -> None:
        from partitions.report import plot_partition, write_partition_json

        counts = partition_label_counts(self.cfg)
        write_partition_json(self.folder.path / "partition.json", counts)
        plot_partition(self.folder.path / "partition.png", counts)

    # --- checkpoints ---------------------------------------------------------------------

    def checkpoint(self, completed_round: int) -> None:
        self.folder.save_checkpoint(
            {
                "round": completed_round,
                "arrays": {k: v.numpy() for k, v in self.arrays.items()},
                "strategy": strategy_state(self.strategy),
            }
        )

    def restore(self, checkpoint: dict[str, Any]) -> None:
        self.arrays = to_array_record(checkpoint["arrays"])
        load_strategy_state(self.strategy, checkpoint["strategy"])
        self.resumed_from = int(checkpoint["round"])
        self.next_round = self.resumed_from + 1

    # --- the loop ------------------------------------------------------------------------

    def run(self, progress: "Progress | None" = None) -> dict[str, Any]:
        cfg = self.cfg
        started = time.perf_counter()
        checkpoint = self.folder.load_checkpoint()
        if checkpoint is not None:
            self.restore(checkpoint)
            self.folder.keep_metrics_up_to(self.next_round - 1)
        else:
            self.folder.save_model(0, self.model.state_dict())
            self.write_partition_report()
        nodes = discover_partitions(self.grid, cfg.num_clients)
        for server_round in range(self.next_round, cfg.rounds + 1):
            t0 = time.perf_counter()
            record = self.train_round(server_round, nodes)
            test_loss, test_acc = self.evaluate_global()
            record = {
                "round": server_round,
                "test_accuracy": test_acc,
                "test_loss": test_loss,
                **record,
                "seconds": time.perf_counter() - t0,
            }
            self.folder.append_metrics(record)
            if progress is not None:
                progress.round_done(record)
            due = cfg.checkpoint_every and server_round % cfg.checkpoint_every == 0
            if due or server_round == cfg.rounds:
                self.checkpoint(server_round)
        return self.finish(time.perf_counter() - started)

    def finish(self, wall_seconds: float) -> dict[str, Any]:
        from fedpfn.plots import plot_run  # matplotlib only where a run ends, not in every client

        self.model.load_state_dict(self.arrays.to_torch_state_dict())
        self.folder.save_model(self.cfg.rounds, self.model.state_dict())
        rows = self.folder.read_metrics()
        plot_run(rows, self.folder.path / "accuracy.png", title=self.cfg.algorithm)
        last = rows[-5:]
        summary = {
            "algorithm": self.cfg.algorithm,
            "server": self.cfg.server,
            "rounds": self.cfg.rounds,
            "final_test_accuracy": rows[-1]["test_accuracy"],
            "final_test_loss": rows[-1]["test_loss"],
            "best_test_accuracy": max(r["test_accuracy"] for r in rows),
            "last5_mean_accuracy": float(np.mean([r["test_accuracy"] for r in last])),
            "bytes_up_total": sum(r["bytes_up"] for r in rows),
            "bytes_down_total": sum(r["bytes_down"] for r in rows),
            "num_failures_total": sum(r["num_failures"] for r in rows),
            "wall_seconds": wall_seconds,
        }
        self.folder.write_summary(summary)
        return summary


class Progress:
    """One line per round: a long run shows where it is (coloured on a terminal)."""

    def __init__(self, total_rounds: int) -> None:
        self.total = total_rounds
        self.console = Console(highlight=False)

    def round_done(self, record: dict[str, Any]) -> None:
        failed = f" [red]failed {record['num_failures']}[/red]" if record["num_failures"] else ""
        skipped = " [red]skipped[/red]" if record["skipped"] else ""
        self.console.print(
            f"round {record['round']:>4}/{self.total}  acc [bold]{record['test_accuracy']:.4f}[/bold]  "
            f"loss {record['test_loss']:.4f}  train {record['train_loss']:.4f}  "
            f"clients {record['num_clients']}{failed}{skipped}  {record['seconds']:.1f}s"
        )
