"""FedAvg's client rule, the base every client part extends, and one local round.

A client is a list of parts: its client rule (FedAvg's local SGD, or a small subclass) and,
optionally, an anchor method; `fedpfn.runtime.algorithms` states the composition rule. A part
changes behaviour only through hooks: `begin_round`, the training loop's `loss_term`,
`after_backward` and `after_step`, `end_round` and `finish_reply`. Everything a part may
read about the round is in its `RoundContext`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import torch
from flwr.app import ArrayRecord, MetricRecord, RecordDict
from torch import nn

from clients.state import ClientState
from fedpfn.core import protocol
from fedpfn.core.seeding import Stream, torch_generator
from fedpfn.core.training import CompositeHooks, NoHooks, evaluate, make_optimizer, minibatches, train_local
from fedpfn.core.cache import ClientData, client_data, model_skeleton

if TYPE_CHECKING:
    from fedpfn.core.config import RunConfig


@dataclass(frozen=True)
class NoParams:
    """An algorithm without hyperparameters of its own."""


@dataclass
class RoundContext:
    """What a client part may read in one round."""

    cfg: RunConfig
    partition_id: int
    server_round: int
    lr: float
    device: torch.device
    state: ClientState  # records kept across this client's rounds
    global_params: dict[str, torch.Tensor]  # the parameters as received
    # entries that do not train this round (an anchor method fills it); a rule that keeps
    # per-entry statistics leaves them unchanged there
    frozen: dict[str, torch.Tensor] = field(default_factory=dict)


class ClientPart(NoHooks):
    """A client rule or an anchor method: a name, its hyperparameters and hooks (all empty here)."""

    name: ClassVar[str]
    Params: ClassVar[type] = NoParams
    optimizers: ClassVar[tuple[str, ...]] = ("sgd", "adam")  # local optimizers it is defined for
    state_keys: ClassVar[tuple[str, ...]] = ()  # records it keeps across rounds (ClientState)

    def __init__(self, ctx: RoundContext) -> None:
        self.ctx = ctx
        self.params: Any = ctx.cfg.params(self.Params)

    def begin_round(self, model: nn.Module, content: RecordDict) -> None:
        """After the global weights are loaded, before the first step; `content` is the message."""

    def end_round(self, model: nn.Module, steps: int) -> None:
        """After the last step, before the reply is built."""

    def finish_reply(self, reply: RecordDict) -> None:
        """Add records to the reply, or rewrite them (FedPNU packs what was sent)."""


class FedAvgClient(ClientPart):
    """FedAvg's rule: local SGD from the received model, the whole trained model sent back."""

    name = "fedavg"


def local_round(
    parts: list[type[ClientPart]],
    cfg: RunConfig,
    partition_id: int,
    context_state: RecordDict,
    device: torch.device,
    content: RecordDict,
    *,
    data: ClientData | None = None,
    state_root: Path | None = None,
) -> RecordDict:
    """One round of local training from a train message; returns the reply's content.

    `data`: the client's examples when its node holds its own copy (else taken from the
    whole dataset); `state_root`: where its state lives when not in the run folder.
    """
    started = time.perf_counter()
    config = content.config_records[protocol.CONFIG]
    server_round = int(config[protocol.SERVER_ROUND])
    data = data if data is not None else client_data(cfg, partition_id, device)
    model = model_skeleton(cfg, device, data)
    model.load_state_dict(content.array_records[protocol.ARRAYS].to_torch_state_dict())
    named = config.get(protocol.ACCEPTED_ROUND)  # None in a hand-made message: stateful parts refuse it
    accepted = None if named is None else int(named)
    state = ClientState.of(cfg, partition_id, context_state, accepted, state_root)
    ctx = RoundContext(
        cfg=cfg,
        partition_id=partition_id,
        server_round=server_round,
        lr=float(config[protocol.LR]),
        device=device,
        state=state,
        global_params={n: p.detach().clone() for n, p in model.named_parameters()},
    )
    before = local_accuracy(model, data)  # the global model as received
    hooks = CompositeHooks([cls(ctx) for cls in parts])
    for part in hooks.parts:
        part.begin_round(model, content)
    optimizer = make_optimizer(model, cfg.optimizer, ctx.lr, cfg.momentum, cfg.weight_decay)
    generator = torch_generator(cfg.seed, Stream.DATA_ORDER, server_round, partition_id)
    batches = minibatches(data.train, cfg.batch_size, cfg.local_epochs, generator)
    result = train_local(model, data.x, data.y, batches, optimizer, hooks)
    for part in hooks.parts:
        part.end_round(model, result.steps)
    metrics = MetricRecord(
        {
            protocol.TRAIN_LOSS: result.loss,
            protocol.TRAIN_ACCURACY: result.accuracy,
            protocol.NUM_EXAMPLES: len(data.train),
            protocol.PARTITION_ID: partition_id,
            protocol.TRAIN_SECONDS: time.perf_counter() - started,
        }
    )
    if before is not None:
        metrics[protocol.LOCAL_ACC_BEFORE] = before
        metrics[protocol.LOCAL_ACC_AFTER] = local_accuracy(model, data)
    reply = RecordDict({protocol.ARRAYS: ArrayRecord(model.state_dict()), protocol.METRICS: metrics})
    for part in hooks.parts:
        part.finish_reply(reply)
    return reply


def local_accuracy(model: nn.Module, data: ClientData) -> float | None:
    """Accuracy on the client's local test split (`--local-test-fraction`); None without one."""
    if len(data.local_test) == 0:
        return None
    held = data.local_test.to(data.x.device)
    return evaluate(model, data.x[held], data.y[held])[1]
