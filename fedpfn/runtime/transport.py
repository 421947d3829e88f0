"""The round exchange with the grid: which node holds which partition now, and one round
sent and collected against a deadline.

Why not `grid.send_and_receive(messages)`: without a timeout it waits for every reply
forever, so one SuperNode that dies mid-round, or a very slow one, blocks the run; with a
timeout it still says nothing about who did not answer (and the deployed grid polls only
every 3 s). Here a round closes at its deadline with the replies that arrived, and every
message that got no usable reply is named, by its key (the partition id), with the reason.

Late replies never reach a later round, for two independent reasons: a round's messages
live on the SuperLink only until shortly after its deadline (their TTL), so a node that
comes back later never trains on them and the SuperLink refuses their replies; and only
this round's message ids are pulled, any other reply is dropped.

A training round goes through a `TrainGrid`, which gives the round's totals with its replies:
`PlainGrid` takes them of the replies for any Flower Grid; the batched engine's grid
(engines/grid.py) takes them where its clients trained. Whether the replies must carry the
clients' arrays is an argument of the call (`need_models`), not a key of the messages.

Nodes come and go in a real federation (a crashed SuperNode restarted, a replacement
machine). `NodeDirectory` maps partition ids to the nodes connected now, asking only nodes
it has not met, so a restarted node takes part again from the next round.
"""

from __future__ import annotations

import itertools
import logging
import math
import time
from collections.abc import Collection, Hashable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

from flwr.app import Message, MessageType, RecordDict
from flwr.serverapp import Grid

from fedpfn.core import protocol
from fedpfn.core.config import RunConfig
from fedpfn.core.seeding import Stream, numpy_rng
from strategies import RoundTotals

log = logging.getLogger("fedpfn")

TTL_GRACE = 5.0  # s a message outlives its round's deadline: room for the last pull, no more
FIRST_POLL, MAX_POLL = 0.02, 0.1  # s between pulls: a reply is seen within 0.1 s (benchmarks: --poll-cap)

K = TypeVar("K", bound=Hashable)


@dataclass(frozen=True)
class RoundReplies(Generic[K]):
    """What one exchange returned, by the key each message was sent under."""

    replies: dict[K, Message]  # answered in time, without error
    failed: dict[K, str]  # no usable reply, and why (the node's error, or the deadline)


@dataclass(frozen=True)
class TrainedRound(RoundReplies[int]):
    """A training round's replies, by partition id, and the totals of the successful ones in
    partition order (strategies.totals), which a mean-based server aggregates."""

    totals: RoundTotals


class TrainGrid(Protocol):
    """What the server trains a round through: its replies always come with the round's totals.

    `need_models`: the server reads every client's arrays this round (it measures their
    alignment, or its strategy is not mean-based); otherwise a grid that takes the totals where
    the clients trained may answer with METRICS and UPLOAD alone (protocol.UPLOAD).
    """

    def train_round(self, messages: Mapping[int, Message], timeout: float | None, need_models: bool) -> TrainedRound:
        """Send a round's train messages (by partition id) and collect replies and totals by `timeout`."""
        ...


class PlainGrid:
    """A Flower Grid (the Ray engine's, a deployment's SuperLink): every reply carries its arrays,
    whatever `need_models` says, and the round's totals are taken of the replies."""

    def __init__(self, grid: Grid, param_names: Sequence[str]) -> None:
        """`param_names`: the model's parameters (the rest of what is sent is buffers)."""
        self.grid = grid
        self.param_names = list(param_names)

    def train_round(self, messages: Mapping[int, Message], timeout: float | None, need_models: bool) -> TrainedRound:
        return self.totals_of(messages, send_round(self.grid, messages, timeout))

    def totals_of(self, messages: Mapping[int, Message], got: RoundReplies[int]) -> TrainedRound:
        """`got` with the totals of its successful replies, in partition order (RoundTotals.of_replies)."""
        sent = protocol.to_numpy(next(iter(messages.values())).content[protocol.ARRAYS]) if messages else {}
        good = [got.replies[p].content for p in sorted(got.replies)]
        totals = RoundTotals.of_replies(good, sent, self.param_names)
        return TrainedRound(replies=got.replies, failed=got.failed, totals=totals)


def fails_this_round(cfg: RunConfig, server_round: int, partition_id: int) -> bool:
    """`--simulate-failures`: whether this client fails this round. Seeded, so a rerun (or a
    resumed run) sees the same failures."""
    if cfg.federation.simulate_failures <= 0:
        return False
    return bool(numpy_rng(cfg.seed, Stream.FAILURES, server_round, partition_id).random() < cfg.federation.simulate_failures)


def simulated_failures(cfg: RunConfig, server_round: int, partitions: Collection[int]) -> dict[int, str]:
    """The clients of `partitions` that fail this round, with the reason a failed reply gives.

    The one place failures are simulated, for every engine and deployment alike: the server
    never sends such a client its message, as if the client had crashed on receiving it.
    """
    return {
        p: f"SimulatedFailure: client {p} failed in round {server_round} (simulated)"
        for p in partitions
        if fails_this_round(cfg, server_round, p)
    }


def send_round(grid: Grid, messages: Mapping[K, Message], timeout: float | None) -> RoundReplies[K]:
    """Send `messages` and collect their replies until all came or `timeout` s passed.

    The messages' TTL is set to end `TTL_GRACE` s after the deadline (see the module
    docstring); replies are matched to their message by id, never by sender. With
    `timeout` None every reply is awaited (a node the SuperLink marks offline still gets
    an error reply, and Flower's default TTL of 12 h bounds the rest).
    """
    deadline = math.inf if timeout is None else time.time() + timeout
    if timeout is not None:
        for message in messages.values():
            message.metadata.ttl = deadline + TTL_GRACE - message.metadata.created_at
    keys = list(messages)
    ids = list(grid.push_messages([messages[k] for k in keys]))
    ids += [""] * (len(keys) - len(ids))  # a refused push returns fewer ids, or None ones
    pending = {mid: key for key, mid in zip(keys, ids) if mid}
    failed = {key: "the SuperLink did not accept the message" for key, mid in zip(keys, ids) if not mid}
    replies: dict[K, Message] = {}
    for wait in _poll_delays(deadline):
        if not pending:
            break
        for reply in grid.pull_messages(list(pending)):
            key = pending.pop(reply.metadata.reply_to_message_id, None)
            if key is None:
                continue  # not a reply to this round's messages: dropped
            if reply.has_error():
                failed[key] = f"error {reply.error.code}: {reply.error.reason}"
            else:
                replies[key] = reply
        if pending:
            time.sleep(wait)
    failed.update({key: f"no reply within {timeout:g} s" for key in pending.values()})  # timeout set
    return RoundReplies(replies=replies, failed=failed)


def _poll_delays(deadline: float) -> Iterator[float]:
    """Sleeps between pulls, growing from FIRST_POLL to MAX_POLL; one last pull at the deadline."""
    delay = FIRST_POLL
    while (left := deadline - time.time()) > 0:
        yield min(delay, left)
        delay = min(delay * 1.5, MAX_POLL)
    yield 0.0


class NodeDirectory:
    """Partition id -> node id for the nodes connected now.

    `refresh()` reads the connected node ids from the SuperLink and sends a QUERY only to
    nodes it has not met; a node that went away is forgotten, so it is asked again when it
    comes back (it may come back holding another partition). When two connected nodes claim
    one partition, the one that answered last wins: it is the replacement of a node that
    died and that the SuperLink has not yet marked offline.
    """

    def __init__(self, grid: Grid, num_partitions: int, query_timeout: float | None) -> None:
        self._grid = grid
        self._num_partitions = num_partitions
        self._query_timeout = query_timeout
        self._claims: dict[int, tuple[int, int] | None] = {}  # node -> (partition, order); None: ignored
        self._sizes: dict[int, int] = {}  # node -> its num-partitions, when its node config has one
        self._order = itertools.count()

    def refresh(self) -> dict[int, int]:
        """Partition id -> node id now; one QUERY per node not met before."""
        online = set(self._grid.get_node_ids())
        for gone in set(self._claims) - online:
            log.info("node %d (partition %s) left", gone, self._partition(gone))
            del self._claims[gone]
        if new := sorted(online - set(self._claims)):
            self._ask(new)
        return self.mapping()

    def mapping(self) -> dict[int, int]:
        """Partition id -> node id of the nodes met and still connected at the last refresh."""
        claims = sorted((c[1], c[0], node) for node, c in self._claims.items() if c is not None)
        return {partition: node for _, partition, node in claims}  # the latest claim wins

    def wait_for(
        self, partitions: Collection[int], timeout: float, poll: float = 1.0, report_every: float = 10.0
    ) -> dict[int, int]:
        """Refresh until every one of `partitions` has a node or `timeout` s passed; say how it goes."""
        started = last_report = time.monotonic()
        while not set(partitions) <= set(mapping := self.refresh()):
            now = time.monotonic()
            if now - started >= timeout:
                break
            if now - last_report >= report_every:
                log.warning(
                    "waiting for nodes: %d of %d partitions have one (%d nodes connected), %.0f s left",
                    len(set(partitions) & set(mapping)), len(partitions), len(self._claims), timeout - now + started,
                )
                last_report = now
            time.sleep(poll)
        return mapping

    def federation_sizes(self) -> dict[int, int]:
        """node id -> the number of partitions the node says its federation has (if it says)."""
        return dict(self._sizes)

    def _partition(self, node_id: int) -> int | None:
        claim = self._claims.get(node_id)
        return claim[0] if claim else None

    def _ask(self, node_ids: list[int]) -> None:
        queries = {n: Message(RecordDict(), dst_node_id=n, message_type=MessageType.QUERY) for n in node_ids}
        answers = send_round(self._grid, queries, self._query_timeout)
        for node_id, reason in answers.failed.items():
            log.warning("node %d did not say its partition (%s); asked again next round", node_id, reason)
        for node_id, reply in answers.replies.items():
            self._record(node_id, reply)

    def _record(self, node_id: int, reply: Message) -> None:
        try:
            node = reply.content.config_records[protocol.NODE]
            partition = int(node[protocol.PARTITION_ID])
            if protocol.NUM_PARTITIONS in node:
                self._sizes[node_id] = int(node[protocol.NUM_PARTITIONS])
        except (KeyError, TypeError, ValueError):
            log.warning("node %d answered without a partition id; it is ignored", node_id)
            self._claims[node_id] = None
            return
        if not 0 <= partition < self._num_partitions:
            log.warning(
                "node %d holds partition-id %d, outside 0..%d; it is ignored",
                node_id, partition, self._num_partitions - 1,
            )  # fmt: skip
            self._claims[node_id] = None
            return
        if (holder := self.mapping().get(partition)) is not None:
            log.warning("partition %d: node %d replaces node %d", partition, node_id, holder)
        self._claims[node_id] = (partition, next(self._order))
