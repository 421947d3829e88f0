"""Flower's log notes that mean nothing to a fedpfn user, dropped where fedpfn causes them.

Flower logs on its `flwr` logger (not with `warnings`). Some of its notes are about a choice
fedpfn makes for the user, not one the user made: `fraction_evaluate is set to 0.0` (fedpfn
samples the clients itself and evaluates the global model on the server, so the inner strategy
never runs federated evaluation: strategies.registry.TAKE_ALL), or `Received 1 results` when a
mean-based strategy is handed the round's example-weighted mean as one reply (strategies.composed,
guarantee 3; fedpfn's round line counts the clients). Each is dropped while the call that causes
it runs, and only that record: every other note of Flower's passes.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager

FLOWER_LOGGER = "flwr"
NO_FEDERATED_EVALUATION = "fraction_evaluate is set to 0.0"  # FedAvg.__init__, for TAKE_ALL's 0.0
ONE_MERGED_REPLY = "aggregate_train: Received 1 results and 0 failures"  # the round's mean as one reply


class DropFlowerNote(logging.Filter):
    """Drops Flower's records whose message holds `text`; every other record passes."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.text = text

    def filter(self, record: logging.LogRecord) -> bool:
        return self.text not in record.getMessage()


@contextmanager
def flower_note_dropped(text: str) -> Iterator[None]:
    """Flower's note holding `text` dropped while the block runs (in any thread of this process)."""
    logger = logging.getLogger(FLOWER_LOGGER)
    note = DropFlowerNote(text)
    logger.addFilter(note)
    try:
        yield
    finally:
        logger.removeFilter(note)
