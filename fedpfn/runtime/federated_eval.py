"""Federated evaluation (`--evaluate-clients F`): the clients judge the global model on their own data.

Every `--evaluate-clients-every` rounds (and the last), a seeded fraction F of the clients
(at least one) gets an evaluate message: the round's global model, the run's settings and
the client's ACCEPTED_ROUND. Each evaluates it on its local test split
(`--local-test-fraction`), and its personalised model too where the rule keeps one (FedBN's
BatchNorm layers, `--personal`'s entries: the global model with the client's own values of
them, as its next round would start). The server records, per round, the example-weighted
and plain mean, the 10th percentile and the worst client, beside its central test accuracy:
what personalised and heterogeneous FL is judged by.

The message goes through the grid as a train message does, so the client side is the
ClientApp's `evaluate` on every route (Ray, `flwr run`, a deployment, and the batched
engine's in-process grid): the same code, the same numbers.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch
from flwr.app import ArrayRecord, ConfigRecord, Message, MessageType, MetricRecord, RecordDict
from flwr.serverapp import Grid

from clients.state import ClientState
from fedpfn.core import protocol
from fedpfn.core.cache import ClientData, client_data, model_skeleton
from fedpfn.core.config import RunConfig
from fedpfn.core.groups import ClientEvaluation
from fedpfn.core.personal import PERSONAL
from fedpfn.core.seeding import Stream, numpy_rng
from fedpfn.core.training import evaluate
from fedpfn.runtime.algorithms import personal_of
from fedpfn.runtime.transport import send_round

log = logging.getLogger("fedpfn")

# an evaluate reply's METRICS keys (besides NUM_EXAMPLES: the client's local test examples)
LOSS, ACCURACY = "eval-loss", "eval-accuracy"
PERSONAL_LOSS, PERSONAL_ACCURACY = "personal-eval-loss", "personal-eval-accuracy"
PREFIX = "fed_eval"  # metrics.jsonl: fed_eval_accuracy_mean, fed_eval_personal_accuracy_worst, ...
STATS = ("weighted", "mean", "p10", "worst")


def due(cfg: RunConfig, server_round: int) -> bool:
    """Whether the clients evaluate after this round."""
    evaluation = cfg.federated_eval
    if not isinstance(evaluation, ClientEvaluation):
        return False
    return server_round % evaluation.evaluate_clients_every == 0 or server_round == cfg.federation.rounds


def sample_evaluators(cfg: RunConfig, server_round: int) -> list[int]:
    """The partition ids that evaluate after `server_round`, sorted: seeded by (run seed, round),
    so a resumed run and every engine ask the same clients."""
    count = min(cfg.federation.num_clients, max(1, round(cfg.federated_eval.evaluate_clients * cfg.federation.num_clients)))
    rng = numpy_rng(cfg.seed, Stream.EVALUATION, server_round)
    return sorted(rng.choice(cfg.federation.num_clients, size=count, replace=False).tolist())


def evaluate_message(cfg: RunConfig, server_round: int, arrays: ArrayRecord, node: int, accepted: int) -> Message:
    """One client's evaluate message: the global model, the settings, its last accepted round."""
    config = ConfigRecord({
        protocol.SERVER_ROUND: server_round,
        protocol.RUN_CONFIG: cfg.to_json(),
        protocol.ACCEPTED_ROUND: accepted,
    })  # fmt: skip
    content = RecordDict({protocol.ARRAYS: arrays, protocol.CONFIG: config})
    return Message(content, dst_node_id=node, message_type=MessageType.EVALUATE)


def empty_record(cfg: RunConfig) -> dict[str, Any]:
    """A round's federated-evaluation columns when none was due (kept, so every row has them)."""
    if not isinstance(cfg.federated_eval, ClientEvaluation):
        return {}
    return dict.fromkeys(_keys(cfg), None)


def _keys(cfg: RunConfig) -> list[str]:
    kinds = ("", "personal_") if personalised(cfg) else ("",)
    stats = [f"{PREFIX}_{kind}{metric}_{stat}" for kind in kinds for metric in ("accuracy",) for stat in STATS]
    return [*stats, f"{PREFIX}_loss_weighted", f"{PREFIX}_worst_partition", f"{PREFIX}_clients", f"{PREFIX}_failures"]


def personalised(cfg: RunConfig) -> bool:
    """Whether the run's clients keep entries of their own (a personalised model to evaluate)."""
    return bool(personal_of(cfg, model_skeleton(cfg, torch.device("cpu"))))


def run_evaluation(
    grid: Grid, cfg: RunConfig, server_round: int, arrays: ArrayRecord, nodes: Mapping[int, int],
    accepted: Mapping[int, int], timeout: float | None,
) -> dict[str, Any]:  # fmt: skip
    """Ask this round's evaluators (those with a node now) and summarise their replies."""
    chosen = [p for p in sample_evaluators(cfg, server_round) if p in nodes]
    messages = {p: evaluate_message(cfg, server_round, arrays, nodes[p], accepted.get(p, 0)) for p in chosen}
    replies = send_round(grid, messages, timeout)
    for partition, reason in sorted(replies.failed.items()):
        log.warning("round %d: partition %d did not evaluate: %s", server_round, partition, reason.splitlines()[-1])
    metrics = {p: reply.content.metric_records[protocol.METRICS] for p, reply in replies.replies.items()}
    record = {**empty_record(cfg), **summarise(metrics)}
    record[f"{PREFIX}_clients"] = len(metrics)
    record[f"{PREFIX}_failures"] = len(replies.failed) + len(sample_evaluators(cfg, server_round)) - len(chosen)
    return record


def summarise(metrics: Mapping[int, Mapping[str, Any]]) -> dict[str, Any]:
    """The clients' accuracies as the example-weighted and plain mean, the 10th percentile
    (numpy's linear interpolation) and the worst client's (with its partition id)."""
    if not metrics:
        return {}
    order = sorted(metrics)
    examples = np.array([float(metrics[p][protocol.NUM_EXAMPLES]) for p in order])
    out: dict[str, Any] = {}
    for kind, key in (("", ACCURACY), ("personal_", PERSONAL_ACCURACY)):
        if key not in metrics[order[0]]:
            continue
        values = np.array([float(metrics[p][key]) for p in order])
        out[f"{PREFIX}_{kind}accuracy_weighted"] = float(np.average(values, weights=examples))
        out[f"{PREFIX}_{kind}accuracy_mean"] = float(values.mean())
        out[f"{PREFIX}_{kind}accuracy_p10"] = float(np.percentile(values, 10))
        out[f"{PREFIX}_{kind}accuracy_worst"] = float(values.min())
    losses = np.array([float(metrics[p][LOSS]) for p in order])
    out[f"{PREFIX}_loss_weighted"] = float(np.average(losses, weights=examples))
    out[f"{PREFIX}_worst_partition"] = order[int(np.argmin([float(metrics[p][ACCURACY]) for p in order]))]
    return out


# --- the client side: the ClientApp's evaluate ------------------------------------------------


def evaluate_client(
    cfg: RunConfig,
    partition_id: int,
    content: RecordDict,
    context_state: RecordDict,
    device: torch.device,
    data: ClientData | None = None,
    state_root: Path | None = None,
) -> MetricRecord:
    """One client's evaluate reply: the global model on its local test split, and its own model
    where it keeps personal entries (their values as of its last accepted round)."""
    data = data if data is not None else client_data(cfg, partition_id, device)
    if len(data.local_test) == 0:
        raise ValueError(f"client {partition_id} holds no local test split (--local-test-fraction is 0)")
    model = model_skeleton(cfg, device, data)
    received = content.array_records[protocol.ARRAYS].to_torch_state_dict()
    sent = {name: value.to(device) for name, value in received.items()}
    held = data.local_test.to(data.x.device)
    x, y = data.x[held].to(dtype=next(model.parameters()).dtype), data.y[held]
    loss, accuracy = evaluate(model, x, y, weights=_split(model, sent))
    metrics: dict[str, Any] = {
        protocol.NUM_EXAMPLES: len(y), protocol.PARTITION_ID: partition_id, LOSS: loss, ACCURACY: accuracy,
    }  # fmt: skip
    if personal_of(cfg, model):
        accepted = int(content.config_records[protocol.CONFIG][protocol.ACCEPTED_ROUND])
        state = ClientState.of(cfg, partition_id, context_state, accepted, state_root)
        own = protocol.to_numpy(state.load(PERSONAL) or ArrayRecord())
        mine = {n: torch.from_numpy(own[n]).to(device) if n in own else v for n, v in sent.items()}
        metrics[PERSONAL_LOSS], metrics[PERSONAL_ACCURACY] = evaluate(model, x, y, weights=_split(model, mine))
    model.train()
    return MetricRecord(metrics)


def _split(model: torch.nn.Module, entries: dict[str, torch.Tensor]) -> tuple[dict, dict]:
    """(parameters, buffers) of a state dict, as `evaluate` takes weights."""
    names = {name for name, _ in model.named_parameters()}
    return {n: v for n, v in entries.items() if n in names}, {n: v for n, v in entries.items() if n not in names}
