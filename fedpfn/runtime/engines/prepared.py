"""A round's cohort made ready to train: the message decoded once, each client's data, state,
minibatches, start and tensors, and the rules composed. What every way of running it reads.

A cohort is the clients of one round that share a train message (its model, its config, the
server parts' records). The rules' hooks (clients/base.py) say what differs from FedAvg.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from flwr.app import ArrayRecord, RecordDict
from torch import nn

from clients.attacks import Attack
from clients.base import ClientRound, ClientRule, Round
from clients.state import ClientState
from fedpfn.core import protocol
from fedpfn.core.cache import ClientData, client_data, model_skeleton
from fedpfn.core.personal import PERSONAL, personal_entries
from fedpfn.core.seeding import Stream, torch_generator
from fedpfn.core.training import OptimizerSpec, Tally, Tensors, evaluate, minibatches
from fedpfn.runtime.engines.client_step import ComposedRules, PerClient

if TYPE_CHECKING:
    from fedpfn.core.config import RunConfig


@dataclass
class ClientJob:
    """What an engine hands in for one client of a cohort."""

    partition_id: int
    context_state: RecordDict  # Flower's context.state of the client's node
    accepted_round: int | None  # the message's ACCEPTED_ROUND (None: it named none)
    data: ClientData | None = None  # its examples when its node holds its own copy
    state_root: Path | None = None  # where its state lives when not in the run folder

    def take_state(self, trained: RecordDict) -> None:
        """`context_state` made to hold exactly `trained`'s records: the state as another process
        (a Ray actor, a worker) left it, kept in the node's own RecordDict."""
        for key in list(self.context_state):
            del self.context_state[key]
        for key, record in trained.items():
            self.context_state[key] = record


@dataclass
class ClientTrained:
    """One client after training, unstacked or stacked (client first)."""

    params: Tensors  # as uploaded (after the rules' `uploaded`)
    buffers: Tensors
    outputs: Tensors  # the rules' `outputs`
    tallies: list[Tally]
    seconds: list[float]  # each client's training time
    local_accuracy: list[tuple[float, float] | None]  # (before, after) on its local test split


@dataclass
class PreparedCohort:
    """The clients of one round that share `content`, ready to train."""

    rule_classes: Sequence[type[ClientRule]]
    cfg: RunConfig
    content: RecordDict
    device: torch.device
    jobs: Sequence[ClientJob]
    received: Tensors | None = None  # the message's model, decoded where it arrived (None: from content's ARRAYS)
    round: Round = field(init=False)
    rules: ComposedRules = field(init=False)
    clients: list[ClientRound] = field(init=False)
    starts: list[tuple[Tensors, Tensors]] = field(init=False)  # each client's (params, buffers) to train from
    per_client: list[PerClient] = field(init=False)  # each client's tensors, one dict per rule

    def __post_init__(self) -> None:
        self.round = self._decode()
        self.rules = ComposedRules([cls(self.round) for cls in self.rule_classes])
        data = [job.data if job.data is not None else client_data(self.cfg, job.partition_id, self.device) for job in self.jobs]
        self.clients = [self._client_round(job, d) for job, d in zip(self.jobs, data)]
        self.starts = [self.rules.start(client, *self._personal_start(client)) for client in self.clients]
        self.per_client = [[rule.inputs(client) for rule in self.rules.rules] for client in self.clients]
        self.dtype = next(iter(self.round.start.values())).dtype
        self.spec = OptimizerSpec(
            self.cfg.local.optimizer, self.round.lr, momentum=self.cfg.local.momentum, weight_decay=self.cfg.local.weight_decay
        )

    def _decode(self) -> Round:
        config = self.content[protocol.CONFIG]
        received = self.content[protocol.ARRAYS].to_torch_state_dict() if self.received is None else self.received
        model = model_skeleton(self.cfg, self.device, self.jobs[0].data)
        layers = [kind for cls in self.rule_classes for kind in cls.personal_layers]
        param_names = [name for name, _ in model.named_parameters()]
        on_device = {name: value.to(self.device) for name, value in received.items()}
        return Round(
            cfg=self.cfg,
            server_round=int(config[protocol.SERVER_ROUND]),
            lr=float(config[protocol.LR]),
            model=model,
            start={name: on_device[name] for name in param_names},
            start_buffers={name: value for name, value in on_device.items() if name not in set(param_names)},
            content=self.content,
            personal=personal_entries(model, self.cfg.task.personal, layers),
        )

    @property
    def entries(self) -> list[str]:
        """The model's state_dict names, in the order the message carries them."""
        return list(self.content[protocol.ARRAYS] if self.received is None else self.received)

    def _client_round(self, job: ClientJob, data: ClientData) -> ClientRound:
        state = ClientState.of(self.cfg, job.partition_id, job.context_state, job.accepted_round, job.state_root)
        generator = torch_generator(self.cfg.seed, Stream.DATA_ORDER, self.round.server_round, job.partition_id)
        batches = list(minibatches(data.train, self.cfg.local.batch_size, self.cfg.local.local_epochs, generator))
        return ClientRound(job.partition_id, data, state, batches)

    def _personal_start(self, client: ClientRound) -> tuple[Tensors, Tensors]:
        """The global model with this client's own personal entries in place (the global
        model's in its first round)."""
        start, start_buffers, personal = self.round.start, self.round.start_buffers, self.round.personal
        saved = protocol.to_numpy(client.state.load(PERSONAL) or ArrayRecord()) if personal else {}
        own = lambda sent: {n: torch.from_numpy(saved[n]).to(v.device) if n in saved else v for n, v in sent.items()}  # noqa: E731,E501
        return own(start), own(start_buffers)

    def load(self, k: int, rows: torch.Tensor, stacked: list[int] | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """(inputs, targets) of client k's examples `rows` (a batch, or a stack of batches of the
        clients `stacked`, which share k's data) on the device; the run's attack's `labels` hook
        applied here, the one place a client's batches are read (label-flip poisons them)."""
        x, y = self.clients[k].data.x, self.clients[k].data.y
        rows = rows.to(x.device)
        targets = y[rows].to(self.device, non_blocking=True)
        inputs = x[rows].to(self.device, self.dtype, non_blocking=True)
        if self.attack is None:
            return inputs, targets
        partitions = [self.clients[j].partition_id for j in (stacked or [k])]
        return inputs, self.attack.labels(targets, partitions, self.clients[k].data.num_classes)

    @cached_property
    def attack(self) -> Attack | None:
        """The run's attack among the rules (clients.attacks), None where every client is honest."""
        return next((rule for rule in self.rules.rules if isinstance(rule, Attack)), None)

    def local_accuracy(self, k: int, trained: tuple[Tensors, Tensors], model: nn.Module) -> tuple[float, float] | None:
        """Client k's local test split (`--local-test-fraction`): (the global model's, its own)."""
        data = self.clients[k].data
        if len(data.local_test) == 0:
            return None
        held = data.local_test.to(data.x.device)
        x = data.x[held].to(dtype=self.dtype)
        before = evaluate(model, x, data.y[held], weights=self.starts[k])[1]
        after = evaluate(model, x, data.y[held], weights=trained)[1]
        model.train()
        return before, after
