"""The server's round loop: sample, send, aggregate, evaluate, record, checkpoint.

Flower's `Strategy.start` runs a loop too; this one adds what a research simulator needs
around the same strategy hooks: seeded sampling over partition ids, failed replies
counted and tolerated, communication measured, metrics flushed per round, checkpoints
and resume. The composed strategy (strategies.composed) does the aggregation. What a resume
checks before it starts is fedpfn.runtime.resume; the evaluation set, the partition report
and the summary are fedpfn.runtime.recording.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from functools import partial
from typing import Any

from flwr.app import ArrayRecord, ConfigRecord, Message, RecordDict
from flwr.serverapp import Grid

from clients.attacks import attack_of, mark_malicious
from fedpfn.core import protocol
from fedpfn.core.cache import initial_model
from fedpfn.core.config import RunConfig
from fedpfn.core.files import CLIENTS
from fedpfn.core.training import evaluate, pick_device
from fedpfn.runtime import alignment, federated_eval
from fedpfn.runtime.algorithms import build_strategy, mean_based
from fedpfn.runtime.recording import evaluation_set, write_partition_report, write_summary
from fedpfn.runtime.resume import accepted_rounds
from fedpfn.runtime.runfolder import RunFolder, checkpoint_bytes
from fedpfn.runtime.runfolder.behind import WritesBehind
from fedpfn.runtime.tracking import Tracking, local_test_summary
from fedpfn.runtime.transport import NodeDirectory, PlainGrid, TrainGrid, simulated_failures
from strategies import RoundTotals, SampledGrid, sample_clients

log = logging.getLogger("fedpfn")

NODE_WAIT_SECONDS = 600.0  # at the start, how long to wait for a node per partition


class FederationError(RuntimeError):
    """The federation cannot go on (nodes missing, inconsistent partitions)."""


def train_config(cfg: RunConfig, server_round: int) -> ConfigRecord:
    """What every client needs for one round; the settings travel so clients need no files."""
    return ConfigRecord(
        {
            protocol.SERVER_ROUND: server_round,
            protocol.LR: cfg.lr_at(server_round),
            protocol.RUN_CONFIG: cfg.to_json(),
        }
    )


def with_accepted_round(message: Message, accepted_round: int) -> Message:
    """`message` with a config of its own that names its client's ACCEPTED_ROUND.

    A strategy builds one content for the whole round; this key differs per client, so
    the config is copied rather than written into the record the messages share.
    """
    content = message.content
    config = ConfigRecord(dict(content[protocol.CONFIG]))
    config[protocol.ACCEPTED_ROUND] = accepted_round
    message.content = RecordDict({**content, protocol.CONFIG: config})
    return message


def wait_for_partitions(directory: NodeDirectory, cfg: RunConfig) -> dict[int, int]:
    """Partition id -> node id once every partition has a node, or after NODE_WAIT_SECONDS.

    The run then starts with the partitions that have one; fewer than `min_replies` stop it.
    """
    directory.refresh()
    check_federation_size(directory, cfg.federation.num_clients)
    nodes = directory.wait_for(range(cfg.federation.num_clients), NODE_WAIT_SECONDS)
    missing = sorted(set(range(cfg.federation.num_clients)) - set(nodes))
    if len(nodes) < cfg.federation.min_replies:
        raise FederationError(
            f"only {len(nodes)} of {cfg.federation.num_clients} partitions have a node after {NODE_WAIT_SECONDS:.0f} s "
            f"(min_replies {cfg.federation.min_replies}); start SuperNodes with partition-id in 0..{cfg.federation.num_clients - 1}"
        )
    if missing:
        log.warning("no node holds partition(s) %s yet; they are skipped until one connects", missing[:20])
    return nodes


def check_federation_size(directory: NodeDirectory, num_clients: int) -> None:
    """Fail at once when the nodes say their federation has another size than num_clients.

    Flower's simulation numbers its nodes 0..num-supernodes-1: with fewer nodes than
    clients the missing partitions would never connect, and the run would wait in silence.
    """
    sizes = set(directory.federation_sizes().values())
    if sizes and sizes != {num_clients}:
        size = max(sizes)
        raise FederationError(
            f"num-clients is {num_clients} but the federation has {size} nodes (their num-partitions); "
            f"run it with {num_clients} nodes (flwr run . <federation> --federation-config "
            f"\"num-supernodes={num_clients}\") or set num-clients={size}"
        )


class WorkerLost(RuntimeError):
    """A simulation worker (Ray actor) died: later rounds would silently train fewer clients."""


# How Ray names a dead actor in the error a reply carries (Flower passes the exception text on)
_WORKER_DEATH = ("ActorDiedError", "RayActorError", "The actor is dead")


def stop_if_a_worker_died(server_round: int, failed: dict[int, str]) -> None:
    """Stop before this round is aggregated; its checkpointed predecessor stays resumable."""
    lost = sorted(p for p, reason in failed.items() if any(mark in reason for mark in _WORKER_DEATH))
    if lost:
        raise WorkerLost(
            f"round {server_round}: the simulation worker training partition(s) {lost} died "
            "(killed, or out of memory); Ray does not replace it, so the run stopped rather than "
            "train later rounds on fewer clients"
        )


def error_summary(reason: str, limit: int = 200) -> str:
    """The last non-empty line of an error (a traceback's own message), at most `limit` characters."""
    lines = [line.strip() for line in reason.strip().splitlines() if line.strip()]
    text = lines[-1].removesuffix("'>") if lines else "unknown error"  # Flower wraps it as <'...'>
    return text if len(text) <= limit else text[: limit - 3] + "..."


def report_failures(server_round: int, failed: dict[int, str], missing: list[int]) -> None:
    """One warning line per failed client (the whole error in the debug log), one for missing nodes."""
    for partition, reason in sorted(failed.items()):
        log.warning("round %d: partition %d failed: %s", server_round, partition, error_summary(reason))
        log.debug("round %d: partition %d failure in full: %s", server_round, partition, reason)
    if missing:
        log.warning("round %d: partition(s) %s have no node connected; skipped", server_round, missing)


@dataclass(frozen=True)
class RoundOutcome:
    """What a round's training gave: its metrics row so far, and one row per client that replied."""

    record: dict[str, Any]
    client_rows: list[dict[str, Any]]


class ServerLoop:
    """One run on the server side: the global model, the strategy, the run folder."""

    def __init__(
        self,
        grid: Grid,
        cfg: RunConfig,
        folder: RunFolder,
        checkpoint: dict[str, Any] | None,
        train_grid: TrainGrid | None = None,
    ) -> None:
        """`checkpoint`: what `resume_point` found (None: start at round 1); `train_grid`: what the
        rounds train through (None: `grid`, a plain Flower Grid)."""
        self.grid = grid
        self.cfg = cfg
        self.folder = folder
        self.device = pick_device()  # the server evaluates on a visible GPU, whatever the clients use
        self.model = initial_model(cfg).to(self.device)
        self.strategy = build_strategy(cfg, self.model)
        # the one decision: a mean-based strategy aggregates the round's totals, any other its replies
        self.from_totals = mean_based(cfg)
        names = [name for name, _ in self.model.named_parameters()]
        self.train_grid = train_grid if train_grid is not None else PlainGrid(grid, names)
        self.round_timeout = cfg.federation.round_timeout or None  # 0: wait for every reply
        self.nodes = NodeDirectory(grid, cfg.federation.num_clients, query_timeout=self.round_timeout)
        self.eval_name, self.eval_x, self.eval_y = evaluation_set(cfg, self.device)
        self.alignment = (
            alignment.AlignmentProbe(cfg, self.device, self.eval_x, self.eval_y) if alignment.measured(cfg) else None
        )
        self.arrays = ArrayRecord(self.model.state_dict())
        self.next_round = 1
        self.resumed_from = 0
        self.accepted: dict[int, int] = {}  # see accepted_rounds
        self.elapsed_before = 0.0  # seconds spent by earlier processes of this run
        if checkpoint is not None:
            self.restore(checkpoint)

    # --- one round -----------------------------------------------------------------------

    def train_round(self, server_round: int) -> RoundOutcome:
        cfg = self.cfg
        chosen = sample_clients(cfg.seed, server_round, cfg.federation.num_clients, cfg.federation.clients_per_round)
        nodes = self.nodes.refresh()  # the nodes connected now; new ones are asked their partition
        present = [p for p in chosen if p in nodes]
        missing = [p for p in chosen if p not in nodes]
        failing = simulated_failures(cfg, server_round, present)
        to_send = {p: nodes[p] for p in present if p not in failing}
        sent = self.train_messages(server_round, to_send) if to_send else {}
        need_models = not self.from_totals or alignment.due(cfg, server_round)  # the clients' arrays read
        replies = self.train_grid.train_round(sent, self.round_timeout, need_models=need_models)
        replies.failed.update(failing)
        good = [replies.replies[p] for p in sorted(replies.replies)]
        stop_if_a_worker_died(server_round, replies.failed)
        report_failures(server_round, replies.failed, missing)
        client_rows = [self._client_row(server_round, r) for r in good]
        mark_malicious(client_rows, attack_of(cfg), cfg.seed, cfg.federation.num_clients)
        sent_model = self.arrays
        skipped = len(good) < cfg.federation.min_replies
        if skipped:
            log.warning(
                "round %d skipped: %d successful replies < min_replies %d; global model kept",
                server_round, len(good), cfg.federation.min_replies,
            )  # fmt: skip
        train_loss = float("nan") if skipped else self.aggregate(server_round, good, replies.totals)
        measured = {} if skipped else self.measure_alignment(server_round, good, sorted(replies.replies), sent_model)
        record = {
            "num_clients": len(good),
            "num_failures": len(replies.failed) + len(missing),
            "clients": chosen,
            "failed_partitions": sorted(replies.failed),
            "missing_partitions": missing,
            "train_loss": train_loss,
            "bytes_down": sum(protocol.arrays_bytes(m.content) for m in sent.values()),
            "bytes_up": sum(row["bytes_up"] for row in client_rows),
            "skipped": skipped,
            **self.strategy.round_summary(),
            **measured,
        }
        return RoundOutcome(record, client_rows)

    def measure_alignment(
        self, server_round: int, replies: list[Message], partitions: list[int], sent: ArrayRecord
    ) -> dict[str, Any]:
        """The `align_*` figures of the round's client models, after aggregation, when a measurement
        is due (and two replied): `sent` is the model they started from, `self.arrays` the aggregate."""
        if self.alignment is None or not alignment.due(self.cfg, server_round) or len(replies) < 2:
            return {}
        examples = [int(r.content[protocol.METRICS][protocol.NUM_EXAMPLES]) for r in replies]
        models = self.strategy.client_models(server_round, replies)
        start, fused = protocol.to_numpy(sent), protocol.to_numpy(self.arrays)
        return self.alignment.measure(start, fused, models, partitions, examples)

    def aggregate(self, server_round: int, replies: list[Message], totals: RoundTotals) -> float:
        """The new global model from the round's totals (mean-based strategies) or its replies; its train loss."""
        if self.from_totals:
            arrays, metrics = self.strategy.aggregate_totals(server_round, totals, replies)
        else:
            arrays, metrics = self.strategy.aggregate_train(server_round, replies)
        if arrays is not None:
            self.arrays = arrays
        return float("nan") if metrics is None else float(metrics[protocol.TRAIN_LOSS])

    def train_messages(self, server_round: int, nodes: dict[int, int]) -> dict[int, Message]:
        """The strategy's train messages for these partitions' nodes, by partition id."""
        view = SampledGrid(self.grid, list(nodes.values()))
        config = train_config(self.cfg, server_round)
        partition_of = {node: partition for partition, node in nodes.items()}
        messages = self.strategy.configure_train(server_round, self.arrays, config, view)
        by_partition = {partition_of[m.metadata.dst_node_id]: m for m in messages}
        return {pid: with_accepted_round(m, self.accepted.get(pid, 0)) for pid, m in by_partition.items()}

    @staticmethod
    def _client_row(server_round: int, reply: Message) -> dict[str, Any]:
        metrics = reply.content[protocol.METRICS]
        row: dict[str, Any] = {"round": server_round}
        for key, value in metrics.items():
            row[key.replace("-", "_")] = value
        row["bytes_up"] = protocol.arrays_bytes(reply.content)
        return row

    def evaluate_global(self) -> tuple[float, float]:
        self.model.load_state_dict(self.arrays.to_torch_state_dict())
        return evaluate(self.model, self.eval_x, self.eval_y)

    def evaluate_by_clients(self, server_round: int, record: dict[str, Any]) -> dict[str, Any]:
        """`--evaluate-clients`: the sampled clients' figures on their local test splits, when due
        (`record`: this round's, whose accepted replies decide which personal entries they hold)."""
        if not federated_eval.due(self.cfg, server_round):
            return federated_eval.empty_record(self.cfg)
        accepted = {**self.accepted, **accepted_rounds([record])}
        return federated_eval.run_evaluation(
            self.grid, self.cfg, server_round, self.arrays, self.nodes.mapping(), accepted, self.round_timeout
        )

    # --- checkpoints ---------------------------------------------------------------------

    def checkpoint(self, completed_round: int, elapsed: float) -> bytes:
        """The checkpoint after `completed_round`, as the file's bytes: made now, written behind."""
        tree = {
            "round": completed_round,
            "elapsed_seconds": elapsed,
            "model": protocol.to_numpy(self.arrays),
            "strategy": self.strategy.state(),
        }
        return checkpoint_bytes(self.cfg.fingerprint(), tree)

    def write_round(
        self, outcome: RoundOutcome, checkpoint: bytes | None, tracker: Tracking | None
    ) -> None:
        """The round's rows and its checkpoint, or none of them; then `tracker` hears of it, so
        what it hears of is on disk (on WritesBehind's thread, one round after another)."""
        with self.folder.writing():
            self.folder.append_metrics(*outcome.client_rows, name=CLIENTS)
            self.folder.append_metrics(outcome.record)
            if checkpoint is not None:
                self.folder.write_checkpoint(checkpoint)
        if tracker is not None:
            tracker.round_done(outcome.record, outcome.client_rows)

    def restore(self, checkpoint: dict[str, Any]) -> None:
        self.arrays = protocol.to_array_record(checkpoint["model"], keep_decoded=True)
        self.strategy.load_state(checkpoint["strategy"])
        self.resumed_from = int(checkpoint["round"])
        self.next_round = self.resumed_from + 1
        self.elapsed_before = float(checkpoint["elapsed_seconds"])

    def start_or_resume(self) -> None:
        """Drop what came after the checkpoint; a new run also writes its round-0 files."""
        self.folder.remove_temporary()  # left by a write that a kill cut short
        self.folder.keep_metrics_up_to(self.resumed_from)
        self.accepted = accepted_rounds(self.folder.read_metrics())
        if self.resumed_from == 0:
            self.model.load_state_dict(self.arrays.to_torch_state_dict())
            self.folder.save_model(0, self.model.state_dict())
            write_partition_report(self.cfg, self.folder)

    # --- the loop ------------------------------------------------------------------------

    def run(self, tracker: Tracking | None = None) -> dict[str, Any]:
        """Rounds `next_round`..`rounds`; `tracker` hears of each round, then of the summary."""
        cfg = self.cfg
        started = time.perf_counter()
        with self.folder.writing():
            self.start_or_resume()
        wait_for_partitions(self.nodes, cfg)
        with WritesBehind() as writes:  # a round's files written while the next one trains
            self.rounds(writes, started, tracker)
        with self.folder.writing():
            summary = self.finish(self.elapsed_before + time.perf_counter() - started)
        if tracker is not None:
            tracker.close(summary)
        return summary

    def rounds(self, writes: WritesBehind, started: float, tracker: Tracking | None) -> None:
        """Rounds `next_round`..`rounds`, each one's files handed to `writes`."""
        cfg = self.cfg
        for server_round in range(self.next_round, cfg.federation.rounds + 1):
            t0 = time.perf_counter()
            outcome = self.train_round(server_round)
            record, client_rows = outcome.record, outcome.client_rows
            evaluated = cfg.evaluation.evaluates(server_round, cfg.federation.rounds)
            loss, accuracy = self.evaluate_global() if evaluated else (None, None)
            by_clients = self.evaluate_by_clients(server_round, {"round": server_round, **record})
            record = {
                "round": server_round,
                f"{self.eval_name}_accuracy": accuracy,
                f"{self.eval_name}_loss": loss,
                **record,
                **(local_test_summary(client_rows) if cfg.evaluation.local_test_fraction else {}),
                **by_clients,
                "seconds": time.perf_counter() - t0,
            }
            due = cfg.output.checkpoint_every and server_round % cfg.output.checkpoint_every == 0
            elapsed = self.elapsed_before + time.perf_counter() - started
            checkpoint = self.checkpoint(server_round, elapsed) if due or server_round == cfg.federation.rounds else None
            writes.submit(partial(self.write_round, RoundOutcome(record, client_rows), checkpoint, tracker))
            self.accepted.update(accepted_rounds([record]))

    def finish(self, wall_seconds: float) -> dict[str, Any]:
        self.model.load_state_dict(self.arrays.to_torch_state_dict())
        self.folder.save_model(self.cfg.federation.rounds, self.model.state_dict())
        return write_summary(self.cfg, self.folder, self.eval_name, wall_seconds)
