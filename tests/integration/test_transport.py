"""The round exchange against Flower's own SuperLink state, with nodes that are late or gone.

The grid is Flower's `InMemoryGrid` over a real `InMemoryLinkState` (the store a SuperLink
keeps messages in: TTLs, reply checks, online status). Each node is a thread that does
what a SuperNode does with that store: pull its messages, wait, store a reply; its delay,
its error and when it connects are scripted, which is what these tests are about.
"""

from __future__ import annotations

import secrets
import threading
import time
from collections.abc import Iterator
from uuid import uuid4

import pytest
from flwr.app import ConfigRecord, Error, Message, MessageType, RecordDict
from flwr.proto.task_pb2 import Task  # pylint: disable=E0611
from flwr.server.superlink.linkstate import InMemoryLinkState, LinkStateFactory
from flwr.server.superlink.linkstate.in_memory_linkstate import RunRecord
from flwr.supercore.constant import FLWR_IN_MEMORY_DB_NAME
from flwr.supercore.object_store import ObjectStoreFactory
from flwr.supercore.run import Run
from flwr.supercore.task_identity import TaskIdentity
from flwr.superlink.federation import NoOpFederationManager
from flwr.superlink.federation.noop_federation_manager import NOOP_FEDERATION_ID
from flwr.superlink.grid import InMemoryGrid

from fedpfn.core import protocol
from fedpfn.runtime import transport
from fedpfn.runtime.transport import NodeDirectory, send_round

RUN_ID = 1
SUPERLINK_NODE_ID = 1  # the ServerApp's messages come from the SuperLink's node id
HEARTBEAT = 30.0


class ScriptedNode(threading.Thread):
    """A SuperNode's loop on the link state: pull a message, wait `delay` s, reply."""

    def __init__(self, state: InMemoryLinkState, node_id: int, partition: int, delay: float = 0.0) -> None:
        super().__init__(daemon=True)
        self.state, self.node_id, self.partition, self.delay = state, node_id, partition, delay
        self.error: str | None = None  # reply with this error instead of a result
        self.size: int | None = None  # the num-partitions its node config says, if any
        self.received: list[Message] = []
        self.stored: list[str | None] = []  # the SuperLink's answer to each reply: its id, or None
        self.halt = threading.Event()

    def run(self) -> None:
        while not self.halt.is_set():
            for message in self.state.get_message_ins(node_id=self.node_id, limit=1):
                self.received.append(message)
                self.halt.wait(self.delay)
                self.stored.append(self.state.store_message_res(self.answer(message)))
            self.halt.wait(0.01)

    def answer(self, message: Message) -> Message:
        if self.error is not None:
            reply = Message(Error(code=0, reason=self.error), reply_to=message)
        elif message.metadata.message_type == MessageType.QUERY:
            node = ConfigRecord({protocol.PARTITION_ID: self.partition})
            if self.size is not None:
                node[protocol.NUM_PARTITIONS] = self.size
            reply = Message(RecordDict({protocol.NODE: node}), reply_to=message)
        else:
            tag = message.content.config_records["config"]["round"]
            reply = Message(RecordDict({"echo": ConfigRecord({"round": tag})}), reply_to=message)
        reply.metadata.__dict__["_message_id"] = str(uuid4())  # as the Fleet API does
        return reply


class Link:
    """A SuperLink's state with one run, and the ServerApp's grid on it."""

    def __init__(self) -> None:
        factory = LinkStateFactory(FLWR_IN_MEMORY_DB_NAME, NoOpFederationManager(), ObjectStoreFactory())
        self.state = factory.state()
        run = Run.create_empty(RUN_ID)
        run.federation_id, run.primary_task_id = NOOP_FEDERATION_ID, 1
        self.state.run_ids[RUN_ID] = RunRecord(run=run)
        self.state.task_store[1] = Task(task_id=1, run_id=RUN_ID)
        self.grid = InMemoryGrid(factory)
        self.grid.set_run(run)
        self.nodes: list[ScriptedNode] = []

    def connect(self, partition: int, delay: float = 0.0, start: bool = True) -> ScriptedNode:
        """A node registered and online (a SuperNode that activated)."""
        key = secrets.token_bytes(32)
        node_id = self.state.create_node("owner", "owner", key, heartbeat_interval=HEARTBEAT)
        assert self.state.activate_node(node_id, heartbeat_interval=HEARTBEAT)
        node = ScriptedNode(self.state, node_id, partition, delay)
        self.nodes.append(node)
        if start:
            node.start()
        return node

    def stop(self) -> None:
        for node in self.nodes:
            node.halt.set()
            if node.is_alive():
                node.join(timeout=5)


@pytest.fixture
def link() -> Iterator[Link]:
    saved = TaskIdentity.run_id, TaskIdentity.node_id  # properties: monkeypatch cannot undo them
    TaskIdentity.run_id, TaskIdentity.node_id = RUN_ID, SUPERLINK_NODE_ID
    link = Link()
    yield link
    link.stop()
    TaskIdentity.run_id, TaskIdentity.node_id = saved


def train_messages(nodes: dict[int, ScriptedNode], tag: int) -> dict[int, Message]:
    """One message per partition, tagged so a reply shows which round it answers."""
    return {
        partition: Message(
            RecordDict({"config": ConfigRecord({"round": tag})}),
            dst_node_id=node.node_id,
            message_type=MessageType.TRAIN,
        )
        for partition, node in nodes.items()
    }


def wait_until(condition, seconds: float = 10.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.01)


# --- send_round ------------------------------------------------------------------------------


def test_round_returns_as_soon_as_every_reply_is_in(link: Link) -> None:
    nodes = {p: link.connect(p, delay=0.05) for p in range(3)}
    started = time.monotonic()
    result = send_round(link.grid, train_messages(nodes, tag=1), timeout=30.0)
    assert time.monotonic() - started < 5.0, "waited for the deadline although every reply was in"
    assert sorted(result.replies) == [0, 1, 2] and result.failed == {}
    assert all(r.content.config_records["echo"]["round"] == 1 for r in result.replies.values())


def test_without_timeout_a_round_waits_for_every_reply(link: Link) -> None:
    nodes = {0: link.connect(0), 1: link.connect(1, delay=1.0)}
    result = send_round(link.grid, train_messages(nodes, tag=1), timeout=None)
    assert sorted(result.replies) == [0, 1] and result.failed == {}
    assert send_round(link.grid, {}, timeout=None) == transport.RoundReplies(replies={}, failed={})


def test_round_closes_at_the_timeout_and_names_the_missing_partitions(link: Link) -> None:
    nodes = {0: link.connect(0), 1: link.connect(1, delay=30.0), 2: link.connect(2)}
    nodes[2].error = "ClientApp raised: out of memory"
    started = time.monotonic()
    result = send_round(link.grid, train_messages(nodes, tag=1), timeout=0.8)
    seconds = time.monotonic() - started
    assert 0.8 <= seconds < 3.0
    assert sorted(result.replies) == [0]
    assert result.failed[1] == "no reply within 0.8 s"
    assert "out of memory" in result.failed[2]


def test_late_reply_of_a_closed_round_never_reaches_the_next(link: Link) -> None:
    fast, slow = link.connect(0), link.connect(1, delay=1.0)
    first = send_round(link.grid, train_messages({0: fast, 1: slow}, tag=1), timeout=0.3)
    assert sorted(first.replies) == [0] and 1 in first.failed
    # The slow node answers round 1 after it closed, within the message's TTL: the
    # SuperLink stores that reply, and it must not be taken for the node's round-2 answer.
    wait_until(lambda: len(slow.stored) == 1)
    assert slow.stored[0] is not None, "the late reply should have been stored (TTL grace)"
    slow.delay = 0.0
    second = send_round(link.grid, train_messages({0: fast, 1: slow}, tag=2), timeout=10.0)
    assert sorted(second.replies) == [0, 1] and second.failed == {}
    assert [r.content.config_records["echo"]["round"] for r in second.replies.values()] == [2, 2]


def test_message_of_a_closed_round_expires_on_the_superlink(
    link: Link, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(transport, "TTL_GRACE", 0.2)
    away = link.connect(0, start=False)  # online for the SuperLink, but not pulling
    result = send_round(link.grid, train_messages({0: away}, tag=1), timeout=0.3)
    assert result.failed == {0: "no reply within 0.3 s"}
    time.sleep(0.3)  # past deadline + grace
    away.start()  # the node comes back: the closed round's message must not reach it
    time.sleep(0.3)
    assert away.received == []


# --- NodeDirectory -----------------------------------------------------------------------------


def queries(node: ScriptedNode) -> int:
    return sum(m.metadata.message_type == MessageType.QUERY for m in node.received)


def test_directory_asks_only_nodes_it_has_not_met(link: Link) -> None:
    a, b = link.connect(0), link.connect(1)
    directory = NodeDirectory(link.grid, num_partitions=3, query_timeout=5.0)
    assert directory.refresh() == {0: a.node_id, 1: b.node_id}
    c = link.connect(2)
    assert directory.refresh() == {0: a.node_id, 1: b.node_id, 2: c.node_id}
    assert directory.refresh() == {0: a.node_id, 1: b.node_id, 2: c.node_id}
    assert [queries(n) for n in (a, b, c)] == [1, 1, 1]


def test_node_that_left_and_came_back_is_asked_again(link: Link) -> None:
    a, b = link.connect(0), link.connect(1)
    directory = NodeDirectory(link.grid, num_partitions=2, query_timeout=5.0)
    directory.refresh()
    link.state.deactivate_node(b.node_id)  # the SuperLink marks it offline
    assert directory.refresh() == {0: a.node_id}  # partition 1 has no node this round
    b.partition = 0  # restarted with another partition: the old answer must not be reused
    assert link.state.activate_node(b.node_id, heartbeat_interval=HEARTBEAT)
    assert directory.refresh() == {0: b.node_id}
    assert queries(a) == 1 and queries(b) == 2


def test_replacement_node_takes_over_a_partition_and_bad_ids_are_ignored(link: Link) -> None:
    old = link.connect(0)
    directory = NodeDirectory(link.grid, num_partitions=2, query_timeout=5.0)
    assert directory.refresh() == {0: old.node_id}
    new, stray = link.connect(0), link.connect(7)  # old died; the SuperLink still lists it
    assert directory.refresh() == {0: new.node_id}
    assert queries(stray) == 1
    directory.refresh()
    assert queries(stray) == 1, "a node with an unusable partition id is not asked every round"


def test_node_silent_to_the_query_is_asked_again_next_round(link: Link) -> None:
    a = link.connect(0)
    late = link.connect(1, delay=1.0)
    directory = NodeDirectory(link.grid, num_partitions=2, query_timeout=0.3)
    assert directory.refresh() == {0: a.node_id}
    late.delay = 0.0
    wait_until(lambda: len(late.stored) == 1)
    assert directory.wait_for([0, 1], timeout=10.0, poll=0.05) == {0: a.node_id, 1: late.node_id}
    assert queries(late) == 2


def test_a_federation_of_another_size_is_reported_at_once(link: Link) -> None:
    """flwr run with 2 simulated nodes for 4 clients: said in seconds, not after a 600 s wait."""
    from fedpfn.runtime.server import FederationError, check_federation_size

    for partition in (0, 1):
        link.connect(partition).size = 2
    directory = NodeDirectory(link.grid, num_partitions=4, query_timeout=5.0)
    started = time.monotonic()
    directory.refresh()
    with pytest.raises(FederationError, match=r"num-clients is 4 but the federation has 2 nodes.*num-supernodes=4"):
        check_federation_size(directory, 4)
    assert time.monotonic() - started < 10
    check_federation_size(directory, 2)  # the right size passes
