"""The in-process Flower Grid the batched engine serves a round through.

The unchanged ServerApp, ServerLoop and strategies run over `BatchedGrid`: one node per
partition. A round's train messages arrive in one push (the server loop pushes the whole
round at once); they are decoded once and trained as one cohort by the runner (this
process's CohortRunner, or the RayRunner's actors), and each client is answered with the
reply the ClientApp would send. A round sent through `train_round` is answered at once, its
replies returned with the totals taken where the clients trained (transport.TrainedRound,
strategies.totals.RoundTotals); unless the server needs the clients' models that round, the
replies carry metrics and their upload size only: no client's model is serialised. Query messages, and any message that is not training, go
through the same ClientApp in-process.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Mapping

from flwr.app import ConfigRecord, Context, Error, Message, MessageType, MetricRecord, RecordDict
from flwr.app.user_config import UserConfig
from flwr.clientapp import ClientApp
from flwr.common.constant import ErrorCode
from flwr.serverapp import Grid
from flwr.supercore.run import Run
from flwr.supercore.task_identity import TaskIdentity

from fedpfn.core import protocol
from fedpfn.core.config import RunConfig
from fedpfn.runtime.engines.prepared import ClientJob
from fedpfn.runtime.engines.result import CohortResult
from fedpfn.runtime.transport import PlainGrid, TrainedRound
from strategies import RoundTotals

RUN_ID = 1
SERVER_NODE = 1  # Flower's SUPERLINK_NODE_ID: the sender of every instruction message
FIRST_NODE = 2  # node ids are partition ids from here


def act_as_server() -> None:
    """This process builds messages as the ServerApp's (Flower stamps each with these ids)."""
    TaskIdentity.task_id, TaskIdentity.run_id, TaskIdentity.node_id = 1, RUN_ID, SERVER_NODE

Runner = Callable[[RecordDict, list[ClientJob]], CohortResult]


class BatchedGrid(Grid):
    """Flower's Grid in this process: one node per partition, a round's training as one cohort."""

    def __init__(self, cfg: RunConfig, runner: Runner, app: ClientApp) -> None:
        """`app`: the ClientApp that answers what is not a round's training (queries, evaluation)."""
        self.cfg = cfg
        self.runner = runner
        self.app = app
        self._run = Run.create_empty(RUN_ID)
        self.contexts = {
            FIRST_NODE + pid: Context(
                run_id=RUN_ID,
                node_id=FIRST_NODE + pid,
                node_config={protocol.PARTITION_ID: pid, protocol.NUM_PARTITIONS: cfg.federation.num_clients},
                state=RecordDict(),
                run_config=UserConfig(),
            )
            for pid in range(cfg.federation.num_clients)
        }
        self._replies: dict[str, Message] = {}
        self._param_names: list[str] = []  # the model's parameters, once a cohort trained

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
        messages = stamped(list(messages))
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

    # --- TrainGrid ----------------------------------------------------------------------------

    def train_round(self, messages: Mapping[int, Message], timeout: float | None, need_models: bool) -> TrainedRound:
        """The round as one cohort (transport.TrainGrid), answered at once (in this process there is
        no deadline to wait for): replies with arrays only if `need_models`, with the totals the
        program took. Messages that are not one round's (models of their own) go as a Flower
        grid's would, each with its arrays."""
        keys = sorted(messages, key=lambda key: self._partition(messages[key]))
        if not keys or len({id(messages[key].content[protocol.ARRAYS]) for key in keys}) > 1:
            return PlainGrid(self, self._param_names).train_round(messages, timeout, need_models)
        replies, totals = self._train_cohort(stamped([messages[key] for key in keys]), arrays=need_models)
        return TrainedRound(replies=dict(zip(keys, replies)), failed={}, totals=totals)

    # --- answering ---------------------------------------------------------------------------

    def _answer(self, message: Message) -> None:
        """A message through the ClientApp, as a node would run it; an exception is its error reply."""
        try:
            reply = self.app(message, self.contexts[message.metadata.dst_node_id])
        except Exception as err:  # noqa: BLE001  (a node reports any failure as an error reply)
            reply = error_reply(message, err)
        self._replies[message.metadata.message_id] = reply

    def _train(self, messages: list[Message]) -> None:
        """Train messages pushed as a Flower grid's (a strategy's own exchange): one round's as one
        cohort in partition order, others each as a cohort of its own; every reply with its arrays,
        kept for pull_messages."""
        trained = sorted(messages, key=self._partition)
        shared = {id(m.content[protocol.ARRAYS]) for m in trained}
        for cohort in [trained] if len(shared) == 1 else [[m] for m in trained]:
            replies, _ = self._train_cohort(cohort, arrays=True)
            self._replies.update({reply.metadata.reply_to_message_id: reply for reply in replies})

    def _train_cohort(self, messages: list[Message], arrays: bool) -> tuple[list[Message], RoundTotals]:
        """Train `messages`' clients as one cohort: their replies (with their arrays if `arrays`, else
        with their upload size), in order, and their totals."""
        jobs = [
            ClientJob(self._partition(m), self.contexts[m.metadata.dst_node_id].state, accepted_round(m))
            for m in messages
        ]
        result = self.runner(messages[0].content, jobs)
        self._param_names = list(result.params)
        # all of one shape: one upload record, shared by the replies as a strategy's messages share their content
        upload = None if arrays else ConfigRecord({protocol.UPLOAD_BYTES: protocol.arrays_bytes(result.reply_content(0))})
        replies = []
        for k, message in enumerate(messages):
            content = result.reply_content(k) if arrays else RecordDict({
                protocol.METRICS: MetricRecord(result.metrics[k]), protocol.UPLOAD: upload,
            })  # fmt: skip
            replies.append(Message(content, reply_to=message))
        sent = protocol.to_numpy(messages[0].content[protocol.ARRAYS])
        already_stacked = (result.params, result.buffers, result.records)
        return replies, RoundTotals(lambda: already_stacked, result.metrics, sent, list(result.params))

    def _partition(self, message: Message) -> int:
        return int(self.contexts[message.metadata.dst_node_id].node_config[protocol.PARTITION_ID])


def stamped(messages: list[Message]) -> list[Message]:
    """`messages`, each given a message id as a SuperLink gives one (replies are matched by it)."""
    for message in messages:
        message.metadata.__dict__["_message_id"] = str(uuid.uuid4())
    return messages


def accepted_round(message: Message) -> int | None:
    named = message.content[protocol.CONFIG].get(protocol.ACCEPTED_ROUND)
    return None if named is None else int(named)


def error_reply(message: Message, err: BaseException) -> Message:
    """The error reply of a ClientApp that raised (Flower's code for it, the exception as its reason)."""
    reason = f"{type(err).__name__}: {err}"
    return Message(Error(code=ErrorCode.CLIENT_APP_RAISED_EXCEPTION, reason=reason), reply_to=message)
