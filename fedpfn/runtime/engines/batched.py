"""The batched engine: a round's clients trained as one program in this process.

The unchanged ServerApp, ServerLoop and strategies run over `BatchedGrid`, an in-process
implementation of Flower's `Grid`. A round's train messages arrive in one push (the server
loop pushes the whole round at once); they are decoded once and trained as one cohort
(clients/program.py) on one device, the GPU when one is visible, else the CPU, and each
client is answered with the reply the ClientApp would send. With a mean-based server
algorithm (strategies/registry.py) the replies carry metrics and their upload size only,
and the round's totals are computed on the device (strategies/totals.py): no client's model
is serialised. Query messages, and any message that is not training, go through the same
ClientApp in-process. No Ray is started: start-up is the process, the data and the model.

How a cohort runs (`--engine-mode`): `vmap` stacks the clients and takes each step for all
of them at once (the GPU, and models without convolutions on the CPU); `threads` trains
clients side by side, one CPU thread each (convolutions under vmap become grouped
convolutions, slow on the CPU); `loop` one after another. A round is split into chunks of
`--engine-chunk` clients (0: as many as the device's free memory holds); a chunk that runs
out of GPU memory is retried in halves, never lost.
"""

from __future__ import annotations

import logging
import os
import uuid
from collections.abc import Callable, Iterable
from functools import cached_property

import numpy as np
import torch
from flwr.app import ConfigRecord, Context, Error, Message, MessageType, MetricRecord, RecordDict
from flwr.app.user_config import UserConfig
from flwr.common.constant import ErrorCode
from flwr.serverapp import Grid
from flwr.supercore.run import Run
from flwr.supercore.task_identity import TaskIdentity

from clients import ClientJob, Cohort, CohortResult
from fedpfn.core import protocol
from fedpfn.core.config import RunConfig
from fedpfn.core.settings import ConfigError
from fedpfn.core.training import pick_device
from fedpfn.runtime import env
from fedpfn.runtime.algorithms import client_rules, mean_based
from fedpfn.runtime.app import SimulatedFailure, client_app, fails_this_round, make_server_app
from fedpfn.runtime.lifecycle import RunPlan
from fedpfn.runtime.resources import cpus_problem
from fedpfn.runtime.tracking import Tracking
from strategies import RoundTotals

log = logging.getLogger("fedpfn")

RUN_ID = 1
SERVER_NODE = 1  # Flower's SUPERLINK_NODE_ID: the sender of every instruction message
FIRST_NODE = 2  # node ids are partition ids from here
CONV_MODELS = ("cnn", "resnet20", "vgg11")  # models whose convolutions are slow under vmap on the CPU


# --- placement ------------------------------------------------------------------------------


def device_of(cfg: RunConfig) -> torch.device:
    """The GPU when one is visible and the clients may use it (`client_gpus` not 0), else the CPU."""
    return pick_device(want_gpu=cfg.client_gpus is None or cfg.client_gpus > 0)


def mode_of(cfg: RunConfig, device: torch.device) -> str:
    """`engine_mode`, with auto resolved: vmap on a GPU or for a model without convolutions."""
    if cfg.engine_mode != "auto":
        return cfg.engine_mode
    return "vmap" if device.type == "cuda" or cfg.model not in CONV_MODELS else "threads"


def prepare(cfg: RunConfig) -> RunConfig:
    """Refuse what this engine cannot do, before anything starts; nothing is resolved into the config."""
    if cfg.ray_address:
        env.check_ray_address(cfg.ray_address)
        return cfg
    if problem := cpus_problem(cfg.client_cpus, os.cpu_count() or 1):  # loop mode's threads per client
        raise ConfigError(problem)
    if cfg.client_gpus and not torch.cuda.is_available():
        raise ConfigError(f"client_gpus: {cfg.client_gpus:g} asks for a GPU but none is visible; use --client-gpus 0")
    return cfg


def describe(cfg: RunConfig) -> str:
    """The header's compute line: the device, how a round runs, and why."""
    workers = workers_of(cfg)
    if cfg.ray_address or workers:
        where = f"the Ray cluster at {cfg.ray_address}" if cfg.ray_address else "Ray on this machine"
        count = f"{workers} actors" if workers else "one actor per GPU"
        return f"batched engine on {where}: a round's clients split over {count}, each running the batched program"
    device = device_of(cfg)
    mode = mode_of(cfg, device)
    where = torch.cuda.get_device_name(device) if device.type == "cuda" else f"the CPU, {os.cpu_count()} cores"
    how = {
        "vmap": "all of a round's clients as one vmapped program"
        + (f", {cfg.engine_chunk} per chunk" if cfg.engine_chunk else ", chunks as large as free memory holds"),
        "threads": f"clients side by side on {os.cpu_count()} threads, one each",
        "loop": "one client after another",
    }[mode]
    why = " (auto: convolutions under vmap are slow on the CPU)" if cfg.engine_mode == "auto" and mode == "threads" else ""
    return f"batched engine in this process on {where} ({device.type}): {how}{why}; server evaluates on {pick_device()}"


def run(run: RunPlan, tracker: Tracking) -> None:
    """The rounds over a BatchedGrid, through the same ServerApp as the Ray engine."""
    TaskIdentity.task_id, TaskIdentity.run_id, TaskIdentity.node_id = 1, RUN_ID, SERVER_NODE
    workers = workers_of(run.cfg)
    if workers is None and run.cfg.ray_address:
        workers = start_ray(run.cfg)
    elif workers is not None:
        start_ray(run.cfg)
    runner: Runner = CohortRunner(run.cfg) if workers is None else RayRunner(run.cfg, workers)
    grid = BatchedGrid(run.cfg, runner)
    context = Context(run_id=RUN_ID, node_id=SERVER_NODE, node_config=UserConfig(), state=RecordDict(), run_config=UserConfig())
    make_server_app(run, tracker)(grid, context)


# --- running a cohort: here, or on Ray actors -------------------------------------------------

Runner = Callable[[RecordDict, list[ClientJob]], CohortResult]


class CohortRunner:
    """Trains a round's cohort on this process's device, with the chunk size that fits it."""

    def __init__(self, cfg: RunConfig, threads: int | None = None) -> None:
        self.cfg = cfg
        self.device = device_of(cfg)
        self.mode = mode_of(cfg, self.device)
        cores = threads or os.cpu_count() or 1  # `threads`: clients side by side; `loop`: the ClientApp's
        self.threads = cores if self.mode == "threads" else max(1, int(cfg.client_cpus))
        self.chunk = cfg.engine_chunk or None  # None: measured on the first round (vmap on a GPU)

    def __call__(self, content: RecordDict, jobs: list[ClientJob]) -> CohortResult:
        cohort = Cohort(client_rules(self.cfg), self.cfg, content, self.device, jobs)
        if self.chunk is None and self.mode == "vmap" and self.device.type == "cuda":
            self.chunk = fitting_chunk(cohort, self.device)
        result = cohort.train(self.mode, threads=self.threads, chunk=self.chunk)
        self.chunk = cohort.chunk or self.chunk  # smaller after running out of memory
        return result


class CohortWorker:
    """A Ray actor holding a CohortRunner on the GPU (or CPUs) Ray gave it."""

    def __init__(self, cfg_json: str, cpus: int) -> None:
        from fedpfn.runtime.algorithms import config_from_json

        self.runner = CohortRunner(config_from_json(cfg_json), threads=cpus)

    def train(self, content: RecordDict, jobs: list[ClientJob]) -> tuple[CohortResult, list[RecordDict]]:
        """The cohort's result on the CPU, and the clients' context states as training left them."""
        result = self.runner(content, jobs)
        return result.to(torch.device("cpu")), [job.context_state for job in jobs]


class RayRunner:
    """A round's cohort split over Ray actors, one per GPU, each running the batched program.

    The clients go to the actors in contiguous blocks, so the parts concatenate in order;
    their client state comes back with them (and is on disk in the run folder, which every
    Ray node must therefore see).
    """

    def __init__(self, cfg: RunConfig, workers: int) -> None:
        import ray

        gpus = 1 if torch.cuda.is_available() or cfg.ray_address else 0
        cpus = max(1, (os.cpu_count() or 1) // workers) if not cfg.ray_address else 1
        actor = ray.remote(num_cpus=cpus, num_gpus=gpus)(CohortWorker)
        self.actors = [actor.remote(cfg.to_json(), cpus) for _ in range(workers)]

    def __call__(self, content: RecordDict, jobs: list[ClientJob]) -> CohortResult:
        import ray

        blocks = [list(block) for block in np.array_split(np.arange(len(jobs)), len(self.actors)) if len(block)]
        calls = [actor.train.remote(content, [jobs[i] for i in block]) for actor, block in zip(self.actors, blocks)]
        parts = ray.get(calls)
        for block, (_, states) in zip(blocks, parts):
            for i, state in zip(block, states):
                replace_records(jobs[i].context_state, state)
        return CohortResult.merge([result for result, _ in parts])


def replace_records(target: RecordDict, source: RecordDict) -> None:
    """`target` holding exactly `source`'s records (a context's state, back from an actor)."""
    for key in list(target):
        del target[key]
    for key, record in source.items():
        target[key] = record


def start_ray(cfg: RunConfig) -> int:
    """Ray started here (or joined at `ray_address`); the GPUs it holds (at least 1: one actor)."""
    import ray

    from fedpfn.runtime.engines.ray import backend_config

    logging.getLogger("ray").setLevel(logging.ERROR)
    ray.init(**backend_config(cfg)["init_args"])
    return max(1, int(ray.cluster_resources().get("GPU", 0)))


def workers_of(cfg: RunConfig) -> int | None:
    """Ray actors to spread a round over: set, or one per GPU of a cluster or of a multi-GPU machine."""
    if cfg.engine_workers is not None:
        return cfg.engine_workers
    if cfg.ray_address:
        return None  # known once Ray has joined the cluster: see start_ray
    gpus = torch.cuda.device_count()
    return gpus if gpus > 1 else None


# --- the grid -------------------------------------------------------------------------------


class BatchedGrid(Grid):
    """Flower's Grid in this process: one node per partition, a round's training as one cohort."""

    def __init__(self, cfg: RunConfig, runner: Runner) -> None:
        self.cfg = cfg
        self.runner = runner
        self.totals_wanted = mean_based(cfg)  # else every reply carries its arrays
        self._run = Run.create_empty(RUN_ID)
        self.contexts = {
            FIRST_NODE + pid: Context(
                run_id=RUN_ID,
                node_id=FIRST_NODE + pid,
                node_config={protocol.PARTITION_ID: pid, protocol.NUM_PARTITIONS: cfg.num_clients},
                state=RecordDict(),
                run_config=UserConfig(),
            )
            for pid in range(cfg.num_clients)
        }
        self._replies: dict[str, Message] = {}
        self._totals: dict[frozenset[str], RoundTotals] = {}

    # --- Grid -------------------------------------------------------------------------------

    def set_run(self, run: Run) -> None:
        self._run = run

    @property
    def run(self) -> Run:
        return self._run

    def create_message(
        self, content: RecordDict, message_type: str, dst_node_id: int, group_id: str, ttl: float | None = None
    ) -> Message:
        return Message(content, dst_node_id, message_type, ttl=ttl, group_id=group_id)

    def get_node_ids(self) -> Iterable[int]:
        return list(self.contexts)

    def push_messages(self, messages: Iterable[Message]) -> Iterable[str]:
        """Answer every message at once: training as one cohort, the rest through the ClientApp."""
        messages = list(messages)
        for message in messages:
            message.metadata.__dict__["_message_id"] = str(uuid.uuid4())
        train = [m for m in messages if m.metadata.message_type == MessageType.TRAIN]
        for message in messages:
            if message.metadata.message_type != MessageType.TRAIN:
                self._answer(message)
        if train:
            self._train(train)
        return [m.metadata.message_id for m in messages]

    def pull_messages(self, message_ids: Iterable[str]) -> Iterable[Message]:
        return [self._replies.pop(mid) for mid in message_ids if mid in self._replies]

    def send_and_receive(self, messages: Iterable[Message], *, timeout: float | None = None) -> Iterable[Message]:
        return self.pull_messages(self.push_messages(messages))

    def round_totals(self, message_ids: list[str]) -> RoundTotals | None:
        """The totals of the round these messages trained (once), if the replies carried no arrays."""
        return self._totals.pop(frozenset(message_ids), None)

    # --- answering ---------------------------------------------------------------------------

    def _answer(self, message: Message) -> None:
        """A message through the ClientApp, as a node would run it; an exception is its error reply."""
        try:
            reply = client_app(message, self.contexts[message.metadata.dst_node_id])
        except Exception as err:  # noqa: BLE001  (a node reports any failure as an error reply)
            reply = error_reply(message, err)
        self._replies[message.metadata.message_id] = reply

    def _train(self, messages: list[Message]) -> None:
        """The round's train messages: failed ones answered with an error, the rest as one cohort,
        in partition order (the order the server loop reads replies in, so totals sum alike)."""
        trained = []
        for message in sorted(messages, key=self._partition):
            pid = self._partition(message)
            server_round = int(message.content.config_records[protocol.CONFIG][protocol.SERVER_ROUND])
            if fails_this_round(self.cfg, server_round, pid):
                failure = SimulatedFailure(f"client {pid} failed in round {server_round} (simulated)")
                self._replies[message.metadata.message_id] = error_reply(message, failure)
            else:
                trained.append(message)
        if not trained:
            return
        shared = {id(m.content[protocol.ARRAYS]) for m in trained}
        if len(shared) > 1:  # not one round's messages: each as a cohort of its own, with arrays
            for message in trained:
                self._train_cohort([message], totals=False)
            return
        full = bool(trained[0].content.config_records[protocol.CONFIG].get(protocol.FULL_REPLY, False))
        totals = self._train_cohort(trained, totals=self.totals_wanted and not full)
        if totals is not None:  # asked for by the ids of the round's messages, failed ones included
            self._totals[frozenset(m.metadata.message_id for m in messages)] = totals

    def _train_cohort(self, messages: list[Message], totals: bool) -> RoundTotals | None:
        """Train `messages`' clients as one cohort and answer them; their totals if `totals`."""
        jobs = [
            ClientJob(self._partition(m), self.contexts[m.metadata.dst_node_id].state, accepted_round(m))
            for m in messages
        ]
        result = self.runner(messages[0].content, jobs)
        if totals:
            upload = protocol.arrays_bytes(result.reply_content(0))  # every client's arrays have one shape
            for k, message in enumerate(messages):
                content = RecordDict({
                    protocol.METRICS: MetricRecord(result.metrics[k]),
                    protocol.UPLOAD: ConfigRecord({protocol.UPLOAD_BYTES: upload}),
                })  # fmt: skip
                self._replies[message.metadata.message_id] = Message(content, reply_to=message)
            return CohortTotals(result, protocol.to_numpy(messages[0].content[protocol.ARRAYS]))
        for k, message in enumerate(messages):
            self._replies[message.metadata.message_id] = Message(result.reply_content(k), reply_to=message)
        return None

    def _partition(self, message: Message) -> int:
        return int(self.contexts[message.metadata.dst_node_id].node_config[protocol.PARTITION_ID])


STATE_COPIES = 6  # per parameter a client holds: its parameters, gradient, update, optimizer state, inputs, upload
MEMORY_MARGIN = 0.7  # of the free memory a chunk may plan to use


def fitting_chunk(cohort: Cohort, device: torch.device) -> int:
    """How many clients one vmapped program can hold in the device's free memory.

    One client's activations and gradients are measured on its first batch (the peak of
    one forward and backward); its tensors are counted as STATE_COPIES of its parameters.
    """
    info = cohort.info
    model, batch = info.model, cohort.clients[0].batches[0]
    data = cohort.clients[0].data
    inputs = data.x[batch.to(data.x.device)].to(device, cohort.dtype)
    torch.cuda.synchronize(device)
    before = torch.cuda.memory_allocated(device)
    torch.cuda.reset_peak_memory_stats(device)
    params = {n: p.detach().clone().requires_grad_(True) for n, p in info.start.items()}
    buffers = {n: b.clone() for n, b in info.start_buffers.items()}
    out = torch.func.functional_call(model, (params, buffers), (inputs,))
    out.float().sum().backward()
    peak = torch.cuda.max_memory_allocated(device) - before
    param_bytes = sum(p.numel() * p.element_size() for p in info.start.values())
    del params, buffers, out
    per_client = peak + STATE_COPIES * param_bytes
    free, _ = torch.cuda.mem_get_info(device)
    return max(1, int(MEMORY_MARGIN * free / per_client))


def accepted_round(message: Message) -> int | None:
    named = message.content.config_records[protocol.CONFIG].get(protocol.ACCEPTED_ROUND)
    return None if named is None else int(named)


def error_reply(message: Message, err: BaseException) -> Message:
    """The error reply of a ClientApp that raised (Flower's code for it, the exception as its reason)."""
    reason = f"{type(err).__name__}: {err}"
    return Message(Error(code=ErrorCode.CLIENT_APP_RAISED_EXCEPTION, reason=reason), reply_to=message)


# --- the round's totals, where the clients trained ---------------------------------------------


def client_sum(terms: torch.Tensor) -> torch.Tensor:
    """Σ over the first (client) dimension: one reduction on a GPU; on the CPU one addition per
    client in order, in the terms' dtype, as the server sums replies (a reduction, or torch's
    cumsum, which accumulates float32 in float64, gives other bits)."""
    if terms.device.type != "cpu":
        return terms.sum(0)
    total = terms[0].clone()
    for term in terms[1:]:
        total += term
    return total


class CohortTotals(RoundTotals):
    """A cohort's totals from its stacked tensors, with the arithmetic `ReplyTotals` uses.

    Sums run in the dtypes Flower's FedAvg and the server parts use; on the CPU client after
    client in the replies' order (`client_sum`), so a round whose clients trained like the
    ClientApp's (`loop`, `threads`) aggregates to the same bits as through Ray.
    """

    def __init__(self, result: CohortResult, sent: dict[str, np.ndarray]) -> None:
        self.result = result
        self.sent = sent
        self.weights = np.array([float(m[protocol.NUM_EXAMPLES]) for m in result.metrics])

    @property
    def replies(self) -> int:
        return len(self.result.metrics)

    @property
    def examples(self) -> float:
        return float(self.weights.sum())

    def _factors(self, like: torch.Tensor, dtype: torch.dtype, scale: bool) -> torch.Tensor:
        """Per-client weights shaped to broadcast over `like`: w_k / Σw (Flower's) or w_k."""
        values = self.weights / self.weights.sum() if scale else self.weights
        return torch.tensor(values, dtype=dtype, device=like.device).view(-1, *[1] * (like.dim() - 1))

    @cached_property
    def param_mean(self) -> dict[str, np.ndarray]:
        """As Flower's FedAvg: Σ x_k · (w_k / Σw) in float32, client after client."""
        return {
            name: client_sum(stack * self._factors(stack, stack.dtype, scale=True)).cpu().numpy()
            for name, stack in self.result.params.items()
        }

    @cached_property
    def buffer_mean(self) -> dict[str, np.ndarray]:
        """As `strategies.totals.weighted_mean`: Σ w_k · x_k / Σw in float64, integers rounded."""
        out = {}
        for name, stack in self.result.buffers.items():
            total = client_sum(stack.to(torch.float64) * self._factors(stack, torch.float64, scale=False))
            mean = total.cpu().numpy() / self.weights.sum()
            like = self.sent[name]
            out[name] = np.asarray(np.rint(mean) if np.issubdtype(like.dtype, np.integer) else mean).astype(like.dtype)
        return out

    @cached_property
    def update_sum(self) -> dict[str, np.ndarray]:
        out = {}
        for name, stack in self.result.params.items():
            sent = torch.from_numpy(self.sent[name]).to(stack.device, torch.float64)
            out[name] = client_sum(stack.to(torch.float64) - sent).cpu().numpy()
        return out

    def record_sum(self, key: str, like: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        stacks = self.result.records.get(key, {})
        return {name: client_sum(stacks[name].to(torch.float64)).cpu().numpy() for name in like}

    def metric_mean(self, key: str) -> float:
        return float(self.metrics[key])

    @cached_property
    def metrics(self) -> dict[str, float]:
        """As Flower's FedAvg weighs them: Σ value · (n_k / Σn), in the replies' order."""
        total = float(sum(self.weights.tolist()))
        out: dict[str, float] = {}
        for metrics, weight in zip(self.result.metrics, self.weights.tolist()):
            for key, value in metrics.items():
                if key != protocol.NUM_EXAMPLES and isinstance(value, int | float):
                    out[key] = value * (weight / total) if key not in out else out[key] + value * (weight / total)
        return out

