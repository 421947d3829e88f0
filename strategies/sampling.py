"""Seeded client sampling over partition ids.

Flower samples with the global `random` module over random node ids, so two runs with
the same seed train different clients. Here round `t` always trains the same clients for
a given run seed, which also makes a resumed run pick what the uninterrupted one would.
"""

from __future__ import annotations

from collections.abc import Iterable

from flwr.app import Message
from flwr.serverapp import Grid

from fedpfn.core.seeding import Stream, numpy_rng


def sample_clients(run_seed: int, server_round: int, num_clients: int, per_round: int) -> list[int]:
    """Partition ids trained in `server_round`, sorted."""
    rng = numpy_rng(run_seed, Stream.SAMPLING, server_round)
    return sorted(rng.choice(num_clients, size=per_round, replace=False).tolist())


class SampledGrid(Grid):
    """A view of a grid that shows only this round's sampled nodes to a strategy."""

    def __init__(self, grid: Grid, node_ids: list[int]) -> None:
        self._grid = grid
        self._node_ids = node_ids

    def get_node_ids(self) -> Iterable[int]:
        return list(self._node_ids)

    @property
    def run(self):  # type: ignore[override]
        return self._grid.run

    def set_run(self, run) -> None:  # type: ignore[override]
        self._grid.set_run(run)

    def create_message(self, *args, **kwargs) -> Message:  # type: ignore[override]
        return self._grid.create_message(*args, **kwargs)

    def push_messages(self, messages: Iterable[Message]) -> Iterable[str]:
        return self._grid.push_messages(messages)

    def pull_messages(self, message_ids: Iterable[str]) -> Iterable[str]:  # type: ignore[override]
        return self._grid.pull_messages(message_ids)

    def send_and_receive(self, messages: Iterable[Message], *, timeout: float | None = None):
        return self._grid.send_and_receive(messages, timeout=timeout)
