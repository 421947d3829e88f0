"""One round of local training for a cohort of clients: the program every engine runs.

A cohort is the clients of one round that share a train message (its model, its config,
the server parts' records). The message is decoded once; each client brings its data, its
state and its minibatches; the rules' hooks (clients/base.py) say what differs from FedAvg.
The same per-client functions run three ways:

- `loop`: one client after another, each unvmapped (the ClientApp: a cohort of one);
- `threads`: the same per-client program on several threads at once, one torch thread each
  (the CPU, where convolutions under vmap are slow: they become grouped convolutions);
- `vmap`: all clients as one program over stacked tensors (`torch.func.vmap`): at step s the
  clients that still have a batch, grouped by batch size, take one vmapped step; a client
  that has run out of batches is never touched again (parameters, optimizer state,
  BatchNorm buffers). Nothing is padded, so ragged last batches are exact with BatchNorm.

`loop` and `threads` give the same numbers bit for bit (each client is the same single-
threaded computation); `vmap` differs only by the floating-point order of batched kernels.
"""

from __future__ import annotations

import copy
import dataclasses
import logging
import time
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from concurrent.futures import ThreadPoolExecutor
from queue import Queue
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from flwr.app import ArrayRecord, MetricRecord, RecordDict
from torch import nn
from torch.func import vmap

from clients.base import Arrays, ClientRound, ClientRule, RoundInfo, Trained
from clients.state import ClientState
from fedpfn.core import protocol
from fedpfn.core.cache import ClientData, client_data, model_skeleton
from fedpfn.core.personal import PERSONAL, left_out, personal_entries
from fedpfn.core.seeding import Stream, torch_generator
from fedpfn.core.training import (
    OptimizerSpec,
    StepView,
    Tensors,
    evaluate,
    local_step,
    minibatches,
    optimizer_state,
)

if TYPE_CHECKING:
    from fedpfn.core.config import RunConfig

MODES = ("loop", "threads", "vmap")
log = logging.getLogger("fedpfn")
Own = list[Tensors]  # one dict of tensors per rule, in the rules' order


@dataclass
class ClientJob:
    """What an engine hands in for one client of a cohort."""

    partition_id: int
    context_state: RecordDict  # Flower's context.state of the client's node
    accepted_round: int | None  # the message's ACCEPTED_ROUND (None: it named none)
    data: ClientData | None = None  # its examples when its node holds its own copy
    state_root: Path | None = None  # where its state lives when not in the run folder


@dataclass
class CohortResult:
    """The cohort after training, as plain tensors (client first) and per-client figures.

    Nothing in it refers back to the rules, so a cohort trained elsewhere (a Ray actor) comes
    back whole, and results of parts of a round concatenate (`merge`).
    """

    partition_ids: list[int]
    entries: list[str]  # the model's state_dict names, in order
    params: Tensors  # the uploaded parameters (after the rules' `upload`), stacked
    buffers: Tensors  # stacked
    records: dict[str, Tensors]  # the rules' reply records (SCAFFOLD's delta), stacked
    metrics: list[dict[str, float | int]]  # per client, as its reply's METRICS
    upload_mask: Arrays | None  # entries every reply leaves out (FedPNU)

    def client_arrays(self, k: int) -> Arrays:
        """Client k's uploaded model as numpy arrays, in state_dict order."""
        merged = {**self.params, **self.buffers}
        return {name: merged[name][k].detach().cpu().numpy() for name in self.entries}

    def reply_content(self, k: int) -> RecordDict:
        """Client k's reply, exactly as the ClientApp sends it."""
        merged = {**self.params, **self.buffers}
        state_dict = {name: merged[name][k].detach().cpu() for name in self.entries}
        content = RecordDict({protocol.ARRAYS: ArrayRecord(state_dict), protocol.METRICS: MetricRecord(self.metrics[k])})
        for key, stacks in self.records.items():
            content[key] = protocol.to_array_record({n: v[k].detach().cpu().numpy() for n, v in stacks.items()})
        if self.upload_mask is not None:
            protocol.pack_reply(content, self.upload_mask)
        return content

    def to(self, device: torch.device) -> CohortResult:
        move = lambda stacks: {n: v.to(device) for n, v in stacks.items()}  # noqa: E731
        records = {key: move(stacks) for key, stacks in self.records.items()}
        return dataclasses.replace(self, params=move(self.params), buffers=move(self.buffers), records=records)

    @classmethod
    def merge(cls, parts: Sequence[CohortResult]) -> CohortResult:
        """Parts of one round (in client order) as one result."""
        cat = lambda stacks: {n: torch.cat([s[n] for s in stacks]) for n in stacks[0]}  # noqa: E731
        first = parts[0]
        return cls(
            partition_ids=[pid for part in parts for pid in part.partition_ids],
            entries=first.entries,
            params=cat([part.params for part in parts]),
            buffers=cat([part.buffers for part in parts]),
            records={key: cat([part.records[key] for part in parts]) for key in first.records},
            metrics=[m for part in parts for m in part.metrics],
            upload_mask=first.upload_mask,
        )


@dataclass
class _Trace:
    """One client's running figures while it trains."""

    loss: torch.Tensor
    correct: torch.Tensor
    seen: int = 0
    seconds: float = 0.0
    local_accuracy: tuple[float, float] | None = None  # (before, after) on its local test split


@dataclass
class Cohort:
    """The clients of one round that share `content`, and the program that trains them."""

    rule_classes: Sequence[type[ClientRule]]
    cfg: RunConfig
    content: RecordDict
    device: torch.device
    jobs: Sequence[ClientJob]
    info: RoundInfo = field(init=False)
    rules: list[ClientRule] = field(init=False)
    clients: list[ClientRound] = field(init=False)
    own: list[Own] = field(init=False)
    chunk: int | None = field(init=False, default=None)  # the vmap chunk that fitted, once trained

    def __post_init__(self) -> None:
        config = self.content.config_records[protocol.CONFIG]
        received = self.content.array_records[protocol.ARRAYS].to_torch_state_dict()
        first = self.jobs[0]
        data = [job.data if job.data is not None else client_data(self.cfg, job.partition_id, self.device) for job in self.jobs]
        model = model_skeleton(self.cfg, self.device, data[0] if first.data is not None else None)
        self.entries = list(received)
        layers = [kind for cls in self.rule_classes for kind in cls.personal_layers]
        param_names = [name for name, _ in model.named_parameters()]
        on_device = {name: value.to(self.device) for name, value in received.items()}
        self.info = RoundInfo(
            cfg=self.cfg,
            server_round=int(config[protocol.SERVER_ROUND]),
            lr=float(config[protocol.LR]),
            model=model,
            start={name: on_device[name] for name in param_names},
            start_buffers={name: value for name, value in on_device.items() if name not in set(param_names)},
            content=self.content,
            personal=personal_entries(model, self.cfg.personal, layers),
        )
        self.rules = [cls(self.info) for cls in self.rule_classes]
        self.clients = [self._client_round(job, d) for job, d in zip(self.jobs, data)]
        self.starts = [self._start(client) for client in self.clients]
        self.own = [[rule.inputs(client) for rule in self.rules] for client in self.clients]
        self.dtype = next(iter(self.info.start.values())).dtype
        self.spec = OptimizerSpec(
            self.cfg.optimizer, self.info.lr, momentum=self.cfg.momentum, weight_decay=self.cfg.weight_decay
        )

    def _client_round(self, job: ClientJob, data: ClientData) -> ClientRound:
        state = ClientState.of(self.cfg, job.partition_id, job.context_state, job.accepted_round, job.state_root)
        generator = torch_generator(self.cfg.seed, Stream.DATA_ORDER, self.info.server_round, job.partition_id)
        batches = list(minibatches(data.train, self.cfg.batch_size, self.cfg.local_epochs, generator))
        return ClientRound(job.partition_id, data, state, batches)

    def _start(self, client: ClientRound) -> tuple[Tensors, Tensors]:
        """(params, buffers) this client trains from: the global model with its own personal
        entries in place (the global model's in its first round)."""
        start, start_buffers, personal = self.info.start, self.info.start_buffers, self.info.personal
        saved = protocol.to_numpy(client.state.load(PERSONAL) or ArrayRecord()) if personal else {}
        own = lambda sent: {n: torch.from_numpy(saved[n]).to(v.device) if n in saved else v for n, v in sent.items()}  # noqa: E731,E501
        return own(start), own(start_buffers)

    # --- the rules' hooks, composed in order (the rule first, the anchors last) -------------

    def _loss_term(self, view: StepView, own: Own) -> torch.Tensor | None:
        terms = [t for t in (rule.loss_term(view, mine) for rule, mine in zip(self.rules, own)) if t is not None]
        return sum(terms[1:], terms[0]) if terms else None

    def _correct(self, grads: Tensors, view: StepView, own: Own) -> Tensors:
        for rule, mine in zip(self.rules, own):
            grads = rule.correct(grads, view, mine)
        return grads

    def _after_step(self, params: Tensors, own: Own) -> Tensors:
        for rule, mine in zip(self.rules, own):
            params = rule.after_step(params, mine)
        return params

    def _step(self, model: nn.Module, step: int) -> Callable[..., tuple[Any, ...]]:
        """One step of one client as a function of its tensors (what vmap maps over)."""

        def one_client(params: Tensors, buffers: Tensors, state: Tensors, own: Own, inputs, targets):
            out = local_step(
                model, params, buffers, state, inputs, targets, step, self.spec,
                loss_term=lambda view: self._loss_term(view, own),
                correct=lambda grads, view: self._correct(grads, view, own),
                after_step=lambda p: self._after_step(p, own),
            )  # fmt: skip
            return out.params, out.optimizer_state, out.loss, out.correct

        return one_client

    def _finish(self, params: Tensors, buffers: Tensors, own: Own) -> tuple[Tensors, Tensors]:
        """(the rules' outputs, the uploaded parameters) of one client after its last step."""
        frozen: Tensors = {}
        for rule, mine in zip(self.rules, own):
            frozen.update(rule.frozen(mine))
        trained = Trained(params, buffers, frozen)
        outputs: Tensors = {}
        for rule, mine in zip(self.rules, own):
            outputs.update(rule.finish(trained, mine))
        for rule, mine in zip(self.rules, own):
            params = rule.upload(params, mine)
        return outputs, params

    # --- running it ------------------------------------------------------------------------

    def train(self, mode: str = "loop", threads: int = 1, chunk: int | None = None) -> CohortResult:
        """Train every client and keep their state for their next round.

        `threads`: torch threads per client in `loop` (the ClientApp's `client_cpus`), or
        clients side by side in `threads` (one torch thread each); `chunk`: clients per
        vmapped program (None: all).
        """
        if mode not in MODES:
            raise ValueError(f"mode '{mode}' is not one of {', '.join(MODES)}")
        if mode == "vmap":
            return self._result(*self._train_chunks(chunk or len(self.clients)))
        if mode == "threads" and threads > 1 and len(self.clients) > 1:
            return self._result(*self._train_threads(threads))
        with torch_threads(threads):
            done = [self._train_one(k, self.info.model) for k in range(len(self.clients))]
        return self._result(*_stack_clients(done))

    def _train_one(self, k: int, model: nn.Module) -> tuple[Tensors, Tensors, Tensors, _Trace]:
        """Client k alone: (uploaded params, buffers, outputs, trace), unstacked."""
        started = time.perf_counter()
        client, own = self.clients[k], self.own[k]
        model.train()
        params = dict(self.starts[k][0])
        buffers = {name: value.clone() for name, value in self.starts[k][1].items()}
        state = optimizer_state(self.spec, params)
        trace = _Trace(torch.zeros((), device=self.device, dtype=self.dtype), torch.zeros((), device=self.device, dtype=torch.int64))
        x, y = client.data.x, client.data.y
        for s, batch in enumerate(client.batches):
            batch = batch.to(x.device)
            inputs = x[batch].to(self.device, self.dtype, non_blocking=True)
            targets = y[batch].to(self.device, non_blocking=True)
            params, state, loss, correct = self._step(model, s + 1)(params, buffers, state, own, inputs, targets)
            trace.loss += loss
            trace.correct += correct
            trace.seen += len(batch)
        outputs, uploaded = self._finish(params, buffers, own)
        self._local_accuracy(k, trace, (params, buffers), model)
        trace.seconds = time.perf_counter() - started
        return uploaded, buffers, outputs, trace

    def _train_threads(self, threads: int) -> tuple[Tensors, Tensors, Tensors, list[_Trace]]:
        """`_train_one` for every client on `threads` threads, one torch thread each.

        A functional call swaps a module's tensors while it runs, so each thread takes a
        model copy of its own from the pool for the client it trains.
        """
        copies: Queue[nn.Module] = Queue()
        for _ in range(min(threads, len(self.clients))):
            copies.put(copy.deepcopy(self.info.model))

        def train(k: int) -> tuple[Tensors, Tensors, Tensors, _Trace]:
            model = copies.get()
            try:
                return self._train_one(k, model)
            finally:
                copies.put(model)

        with torch_threads(1), ThreadPoolExecutor(copies.qsize()) as pool:
            done = list(pool.map(train, range(len(self.clients))))
        return _stack_clients(done)

    def _train_chunks(self, size: int) -> tuple[Tensors, Tensors, Tensors, list[_Trace]]:
        """`_train_stacked` over chunks of `size` clients; a chunk out of GPU memory is retried in halves.

        A chunk starts from its clients' inputs and keeps nothing until every chunk is done
        (`_result` saves the state), so a retried chunk gives the numbers it would have.
        """
        parts, start, count = [], 0, len(self.clients)
        while start < count:
            members = range(start, min(start + size, count))
            try:
                parts.append(self._train_stacked(members))
            except torch.cuda.OutOfMemoryError:
                if size == 1:
                    raise MemoryError(
                        f"one client of {self.cfg.model} (batch {self.cfg.batch_size}) does not fit in the free "
                        f"memory of {self.device}; use a smaller batch size, or --engine ray"
                    ) from None
                size = max(1, size // 2)
                torch.cuda.empty_cache()
                log.warning("a chunk of %d clients ran out of GPU memory; continuing with chunks of %d", len(members), size)
                continue
            start = members.stop
        self.chunk = size  # what fitted: the engine starts the next round from it
        return tuple(_concatenate(part) for part in zip(*parts))  # type: ignore[return-value]

    def _train_stacked(self, members: range) -> tuple[Tensors, Tensors, Tensors, list[_Trace]]:
        """Clients `members` as one vmapped program (see the module docstring)."""
        started = time.perf_counter()
        info, model, ks = self.info, self.info.model, list(members)
        model.train()
        count = len(ks)
        params, buffers = (_stack([self.starts[k][i] for k in ks]) for i in (0, 1))
        state = {n: v.unsqueeze(0).repeat(count, *[1] * v.dim()) for n, v in optimizer_state(self.spec, info.start).items()}
        own = _stack([self.own[k] for k in ks])
        losses = torch.zeros(count, device=self.device, dtype=self.dtype)
        correct = torch.zeros(count, device=self.device, dtype=torch.int64)
        x, y = self.clients[ks[0]].data.x, self.clients[ks[0]].data.y
        for s in range(max(self.clients[k].steps for k in ks)):
            groups: dict[int, list[int]] = defaultdict(list)  # batch size -> positions in the cohort
            for j, k in enumerate(ks):
                if s < self.clients[k].steps:
                    groups[len(self.clients[k].batches[s])].append(j)
            for positions in groups.values():
                rows = torch.stack([self.clients[ks[j]].batches[s] for j in positions]).to(x.device)
                inputs = x[rows].to(self.device, self.dtype, non_blocking=True)
                targets = y[rows].to(self.device, non_blocking=True)
                step = vmap(self._step(model, s + 1), randomness="error")
                if len(positions) == count:  # every client of the chunk: no gather, buffers update in place
                    params, state, loss, hits = step(params, buffers, state, own, inputs, targets)
                    losses += loss
                    correct += hits
                    continue
                index = torch.tensor(positions, device=self.device)
                sub_buffers = _map(buffers, lambda t: t[index])
                new_params, new_state, loss, hits = step(
                    _map(params, lambda t: t[index]), sub_buffers, _map(state, lambda t: t[index]),
                    _map(own, lambda t: t[index]), inputs, targets,
                )  # fmt: skip
                if not state and new_state:  # SGD's momentum buffers appear at the first step
                    state = {n: v.new_zeros((count, *v.shape[1:])) for n, v in new_state.items()}
                for stacked, new in ((params, new_params), (state, new_state), (buffers, sub_buffers)):
                    for name, value in new.items():
                        stacked[name].index_copy_(0, index, value)
                losses.index_add_(0, index, loss)
                correct.index_add_(0, index, hits)
        outputs, uploaded = vmap(self._finish)(params, buffers, own)
        seconds = (time.perf_counter() - started) / count
        traces = []
        for j, k in enumerate(ks):
            trace = _Trace(losses[j], correct[j], sum(len(b) for b in self.clients[k].batches), seconds)
            self._local_accuracy(k, trace, ({n: v[j] for n, v in params.items()}, {n: v[j] for n, v in buffers.items()}), model)
            traces.append(trace)
        return uploaded, buffers, outputs, traces

    def _local_accuracy(self, k: int, trace: _Trace, trained: tuple[Tensors, Tensors], model: nn.Module) -> None:
        """Client k's local test split (`--local-test-fraction`): the global model, then its own."""
        data = self.clients[k].data
        if len(data.local_test) == 0:
            return
        held = data.local_test.to(data.x.device)
        x = data.x[held].to(dtype=self.dtype)
        before = evaluate(model, x, data.y[held], weights=self.starts[k])[1]
        trace.local_accuracy = (before, evaluate(model, x, data.y[held], weights=trained)[1])
        model.train()

    def _personal_kept(self, params: Tensors, buffers: Tensors) -> tuple[Tensors, Tensors, Tensors]:
        """(params, buffers) as uploaded, the personal entries back at the global model's values
        (so no total or reply carries a client's own), and the personal entries as trained."""
        personal = self.info.personal
        sent = {**self.info.start, **self.info.start_buffers}
        trained = {name: value for name, value in {**params, **buffers}.items() if name in personal}
        reset = lambda stacks: {n: sent[n].expand_as(v).clone() if n in personal else v for n, v in stacks.items()}  # noqa: E731
        return (reset(params), reset(buffers), trained) if personal else (params, buffers, {})

    def _upload_mask(self) -> Arrays | None:
        """The entries every reply leaves out: the rules' (FedPNU's anchors) and the personal ones."""
        masks = [m for m in (rule.upload_mask() for rule in self.rules) if m is not None]
        if self.info.personal:
            masks.append(left_out(self.info.personal, {**self.info.start, **self.info.start_buffers}))
        return {name: m for mask in masks for name, m in mask.items()} or None

    def _result(self, params: Tensors, buffers: Tensors, outputs: Tensors, traces: list[_Trace]) -> CohortResult:
        """Metrics per client, and each client's state kept for its next round."""
        records: dict[str, Tensors] = {}
        for rule in self.rules:
            records.update(rule.reply(outputs))
        params, buffers, personal = self._personal_kept(params, buffers)
        result = CohortResult(
            partition_ids=[c.partition_id for c in self.clients],
            entries=self.entries,
            params=params,
            buffers=buffers,
            records=records,
            metrics=[],
            upload_mask=self._upload_mask(),
        )
        stateful = [rule for rule in self.rules if rule.state_keys]
        for k, (client, trace) in enumerate(zip(self.clients, traces)):
            outputs_k = {name: value[k].detach().cpu().numpy() for name, value in outputs.items()}
            metrics: dict[str, float | int] = {
                protocol.TRAIN_LOSS: float(trace.loss) / max(client.steps, 1),
                protocol.TRAIN_ACCURACY: int(trace.correct) / max(trace.seen, 1),
                protocol.NUM_EXAMPLES: len(client.data.train),
                protocol.PARTITION_ID: client.partition_id,
                protocol.TRAIN_SECONDS: trace.seconds,
            }
            if trace.local_accuracy is not None:
                metrics[protocol.LOCAL_ACC_BEFORE], metrics[protocol.LOCAL_ACC_AFTER] = trace.local_accuracy
            for rule in self.rules:
                metrics.update(rule.metrics(outputs_k))
            result.metrics.append(metrics)
            if personal:
                own = {name: value[k].detach().cpu().numpy() for name, value in personal.items()}
                client.state.save(PERSONAL, protocol.to_array_record(own), self.info.server_round)
            if stateful:
                sent = result.client_arrays(k)
                for rule in stateful:
                    rule.keep(client, sent, outputs_k)
        return result


def local_round(
    rule_classes: Sequence[type[ClientRule]],
    cfg: RunConfig,
    partition_id: int,
    context_state: RecordDict,
    device: torch.device,
    content: RecordDict,
    *,
    data: ClientData | None = None,
    state_root: Path | None = None,
) -> RecordDict:
    """One client's round from its train message (the ClientApp): its reply's content."""
    config = content.config_records[protocol.CONFIG]
    named = config.get(protocol.ACCEPTED_ROUND)  # None in a hand-made message: stateful rules refuse it
    job = ClientJob(partition_id, context_state, None if named is None else int(named), data, state_root)
    return Cohort(rule_classes, cfg, content, device, [job]).train("loop").reply_content(0)


@contextmanager
def torch_threads(count: int) -> Iterator[None]:
    """torch's intra-op threads set to `count` while a client trains (float sums depend on it)."""
    before = torch.get_num_threads()
    torch.set_num_threads(max(1, count))
    try:
        yield
    finally:
        torch.set_num_threads(before)


# --- stacks ----------------------------------------------------------------------------------


def _stack(dicts: Sequence[Any]) -> Any:
    """Per-client pytrees (lists of dicts of tensors) as one pytree of stacked tensors."""
    first = dicts[0]
    if isinstance(first, dict):
        return {key: _stack([d[key] for d in dicts]) for key in first}
    if isinstance(first, list):
        return [_stack([d[i] for d in dicts]) for i in range(len(first))]
    return torch.stack(list(dicts))


def _map(tree: Any, fn: Callable[[torch.Tensor], torch.Tensor]) -> Any:
    if isinstance(tree, dict):
        return {key: _map(value, fn) for key, value in tree.items()}
    if isinstance(tree, list):
        return [_map(value, fn) for value in tree]
    return fn(tree)


def _stack_clients(done: list[tuple[Tensors, Tensors, Tensors, _Trace]]) -> tuple[Tensors, Tensors, Tensors, list[_Trace]]:
    params, buffers, outputs, traces = zip(*done)
    return _stack(list(params)), _stack(list(buffers)), _stack(list(outputs)), list(traces)


def _concatenate(parts: Sequence[Any]) -> Any:
    """Chunks' results (dicts of stacks, or lists of traces) as one."""
    if isinstance(parts[0], dict):
        return {key: torch.cat([p[key] for p in parts]) for key in parts[0]}
    return [item for part in parts for item in part]

