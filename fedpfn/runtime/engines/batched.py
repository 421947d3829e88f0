"""The batched engine: a round's clients trained as one program in this process.

The unchanged ServerApp, ServerLoop and strategies run over `BatchedGrid`, an in-process
implementation of Flower's `Grid`. A round's train messages arrive in one push (the server
loop pushes the whole round at once); they are decoded once and trained as one cohort
(program.py) on one device, the GPU when one is visible, else the CPU, and each
client is answered with the reply the ClientApp would send. With a mean-based server
algorithm (strategies/registry.py) the replies carry metrics and their upload size only,
and the round's totals are taken on the device (strategies/totals.py): no client's model
is serialised. Query messages, and any message that is not training, go through the same
ClientApp in-process. No Ray is started (start-up is the process, the data and the model)
unless the round is spread over Ray actors: several GPUs, `--engine-workers`, or a cluster
at `--ray-address` (actors.py; where they go and what is refused: placement.py).

How a cohort runs (`--engine-mode`): `vmap` stacks the clients and takes each step for all
of them at once (the GPU, and models without convolutions on the CPU); `threads` trains
clients side by side, one CPU thread each (convolutions under vmap become grouped
convolutions, slow on the CPU); `loop` one after another. A round is split into chunks of
`--engine-chunk` clients (0: as many as the device's free memory holds); a chunk that runs
out of GPU memory is retried in halves, never lost.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterable

import torch
from flwr.app import ConfigRecord, Context, Error, Message, MessageType, MetricRecord, RecordDict
from flwr.app.user_config import UserConfig
from flwr.common.constant import ErrorCode
from flwr.serverapp import Grid
from flwr.supercore.run import Run
from flwr.supercore.task_identity import TaskIdentity

from fedpfn.core import protocol
from fedpfn.core.config import RunConfig
from fedpfn.core.settings import ConfigError
from fedpfn.core.training import pick_device
from fedpfn.runtime.algorithms import mean_based
from fedpfn.runtime.client_app import SimulatedFailure, client_app, fails_this_round
from fedpfn.runtime.engines.actors import RayRunner, start_ray
from fedpfn.runtime.engines.cohort import CohortRunner, device_of, mode_of
from fedpfn.runtime.engines.placement import batched_slots, local_problem, ray_env_problem
from fedpfn.runtime.engines.prepared import ClientJob
from fedpfn.runtime.engines.result import CohortResult
from fedpfn.runtime.lifecycle import RunPlan
from fedpfn.runtime.server_app import make_server_app
from fedpfn.runtime.tracking import Tracking
from strategies import RoundTotals

RUN_ID = 1
SERVER_NODE = 1  # Flower's SUPERLINK_NODE_ID: the sender of every instruction message
FIRST_NODE = 2  # node ids are partition ids from here


# --- placement ------------------------------------------------------------------------------


def workers_of(cfg: RunConfig) -> int | None:
    """Ray actors to spread a round over: set, or one per GPU of a multi-GPU machine; with
    `ray_address` (None here) as many as placement.plan_actors finds on the cluster."""
    if cfg.engine_workers is not None:
        return cfg.engine_workers
    gpus = 0 if cfg.ray_address else torch.cuda.device_count()
    return gpus if gpus > 1 else None


def uses_ray(cfg: RunConfig) -> bool:
    return bool(cfg.ray_address) or workers_of(cfg) is not None


def prepare(cfg: RunConfig) -> RunConfig:
    """Refuse what this engine cannot do, before anything starts; nothing is resolved into the config.

    With Ray (actors here, or a cluster) the actors' plan is made and checked now: on a
    cluster that means joining it and reading its nodes (batched_slots).
    """
    if uses_ray(cfg) and (problem := ray_env_problem(cfg)):
        raise ConfigError(problem)
    if not cfg.ray_address and (problem := local_problem(cfg)):
        raise ConfigError(problem)
    if uses_ray(cfg):
        batched_slots(cfg)
    return cfg


def describe(cfg: RunConfig) -> str:
    """The header's compute line: the device, how a round runs, and why; or where the actors are."""
    if uses_ray(cfg):
        slots = batched_slots(cfg)
        where = f"the Ray cluster at {cfg.ray_address}" if cfg.ray_address else "Ray on this machine"
        each = ", ".join(f"{s.node.name} {s.cpus} CPU" + (f" + {s.gpus} GPU" if s.gpus else "") for s in slots)
        return f"batched engine on {where}: a round's clients split over {len(slots)} actor(s) ({each}), each running the batched program"
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
    runner: CohortRunner | RayRunner = RayRunner(run.cfg, start_ray(run.cfg)) if uses_ray(run.cfg) else CohortRunner(run.cfg)
    grid = BatchedGrid(run.cfg, runner)
    context = Context(run_id=RUN_ID, node_id=SERVER_NODE, node_config=UserConfig(), state=RecordDict(), run_config=UserConfig())
    try:
        make_server_app(run, tracker)(grid, context)
    finally:
        runner.close()


Runner = Callable[[RecordDict, list[ClientJob]], CohortResult]


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
            sent = protocol.to_numpy(messages[0].content[protocol.ARRAYS])
            return RoundTotals(result.params, result.buffers, result.records, result.metrics, sent)
        for k, message in enumerate(messages):
            self._replies[message.metadata.message_id] = Message(result.reply_content(k), reply_to=message)
        return None

    def _partition(self, message: Message) -> int:
        return int(self.contexts[message.metadata.dst_node_id].node_config[protocol.PARTITION_ID])


def accepted_round(message: Message) -> int | None:
    named = message.content.config_records[protocol.CONFIG].get(protocol.ACCEPTED_ROUND)
    return None if named is None else int(named)


def error_reply(message: Message, err: BaseException) -> Message:
    """The error reply of a ClientApp that raised (Flower's code for it, the exception as its reason)."""
    reason = f"{type(err).__name__}: {err}"
    return Message(Error(code=ErrorCode.CLIENT_APP_RAISED_EXCEPTION, reason=reason), reply_to=message)
