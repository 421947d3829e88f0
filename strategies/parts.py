"""The server side of an algorithm: a part that acts around the inner strategy.

A part adds to what is sent (config entries, records), restores replies to their full form
(FedPNU's packed arrays), updates its own state from the round's totals, and adjusts the
aggregate. `fedpfn.runtime.algorithms` states the order in which parts compose;
`strategies.composed` applies it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from flwr.app import ArrayRecord, RecordDict
from torch import nn

from fedpfn.core.protocol import Arrays
from strategies.totals import RoundTotals

if TYPE_CHECKING:
    from clients.base import ClientRule
    from fedpfn.core.config import RunConfig

Scalar = int | float | str | bool
SERVER_PARTS: dict[str, type[ServerPart]] = {}  # by the name of the client rule they serve
Part = TypeVar("Part", bound="type[ServerPart]")


def server_part(*rules: str) -> Callable[[Part], Part]:
    """Register a server part for the client rules of these names (its file's one decorator)."""

    def register(cls: Part) -> Part:
        for rule in rules:
            known = SERVER_PARTS.get(rule)
            if known is not None and known is not cls:
                raise TypeError(f"client rule '{rule}' has two server parts: {known.__name__} and {cls.__name__}")
            SERVER_PARTS[rule] = cls
        return cls

    return register


@dataclass(frozen=True)
class ServerContext:
    """What a server part is built from.

    Attributes:
        cfg: the run's settings.
        model: the architecture: parameter names, shapes and layer kinds (masks).
        hyper: the hyperparameters of the algorithm the part belongs to (never weights).
        client: the algorithm's client side: what its replies hold.
        personal: entries the clients keep for themselves (fedpfn.core.personal).
    """

    cfg: RunConfig
    model: nn.Module
    hyper: Any
    client: type[ClientRule]
    personal: frozenset[str] = frozenset()


class ServerPart:
    """Hooks around the inner strategy; all neutral here."""

    def __init__(self, ctx: ServerContext) -> None:
        self.ctx = ctx
        self.hyper = ctx.hyper

    def config_entries(self, server_round: int) -> dict[str, Scalar]:
        """Entries added to the round's train config."""
        return {}

    def records(self, server_round: int, sent: Arrays) -> dict[str, ArrayRecord]:
        """Records added to every train message (e.g. a server control variate)."""
        return {}

    def restore(self, server_round: int, replies: list[RecordDict], sent: Arrays) -> None:
        """Rewrite replies received into their full form, in place (before any total is taken)."""

    def absorb(self, server_round: int, totals: RoundTotals, sent: Arrays) -> None:
        """Update this part's state from the round's totals."""

    def adjust(self, server_round: int, params: Arrays, sent: Arrays, totals: RoundTotals) -> Arrays:
        """Change the new global parameters (the inner strategy's result, or the previous part's)."""
        return params

    def state(self) -> dict[str, Any]:
        """What a checkpoint must keep of this part: arrays and plain values only."""
        return {}

    def load_state(self, state: dict[str, Any]) -> None:
        """Restore `state()` output."""

    def round_summary(self) -> dict[str, Any]:
        """Figures of the last round for the run's metrics (e.g. the anchored fraction)."""
        return {}
