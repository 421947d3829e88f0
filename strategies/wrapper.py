"""A Flower strategy around another: the seam where client-rule server state and anchors plug in.

The inner strategy (FedAvg, FedAdam, a user's own) keeps doing the aggregation; a wrapper
only adds to what is sent, rewrites what comes back before the inner strategy sees it,
and adjusts the aggregate. Wrappers stack, so SCAFFOLD's server state and FedPFN's anchors
combine with any server algorithm.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, Message, MetricRecord
from flwr.serverapp import Grid
from flwr.serverapp.strategy import Strategy


class StrategyWrapper(Strategy):
    """Delegates to `inner`; subclasses override the four small hooks."""

    def __init__(self, inner: Strategy) -> None:
        self.inner = inner
        self.sent_arrays: ArrayRecord | None = None

    # --- hooks ---------------------------------------------------------------------------

    def round_config(self, server_round: int) -> dict[str, int | float | str | bool]:
        """Entries added to the round's train config."""
        return {}

    def round_records(self, server_round: int, arrays: ArrayRecord) -> dict[str, ArrayRecord]:
        """Records added to every train message (e.g. a server control variate)."""
        return {}

    def absorb_replies(self, server_round: int, replies: list[Message]) -> None:
        """Rewrite replies in place into the one-ArrayRecord form the inner strategy expects."""

    def adjust_aggregate(self, server_round: int, arrays: ArrayRecord) -> ArrayRecord:
        """Change the inner strategy's new global model."""
        return arrays

    # --- Strategy ------------------------------------------------------------------------

    def configure_train(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        self.sent_arrays = arrays
        config = ConfigRecord({**config, **self.round_config(server_round)})
        messages = list(self.inner.configure_train(server_round, arrays, config, grid))
        extra = self.round_records(server_round, arrays)
        for message in messages:
            for key, record in extra.items():
                message.content[key] = record
        return messages

    def aggregate_train(
        self, server_round: int, replies: Iterable[Message]
    ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        replies = list(replies)
        self.absorb_replies(server_round, [r for r in replies if not r.has_error()])
        arrays, metrics = self.inner.aggregate_train(server_round, replies)
        if arrays is not None:
            arrays = self.adjust_aggregate(server_round, keep_dtypes(arrays, self.sent_arrays))
        return arrays, metrics

    def configure_evaluate(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        return self.inner.configure_evaluate(server_round, arrays, config, grid)

    def aggregate_evaluate(self, server_round: int, replies: Iterable[Message]) -> MetricRecord | None:
        return self.inner.aggregate_evaluate(server_round, replies)

    def summary(self) -> None:
        self.inner.summary()


def keep_dtypes(arrays: ArrayRecord, reference: ArrayRecord | None) -> ArrayRecord:
    """Cast aggregated arrays back to the dtypes that were sent.

    Flower's adaptive strategies return float64 for float32 models, and averaging turns
    BatchNorm's int64 counters into floats; the model's own dtypes are kept instead.
    """
    if reference is None:
        return arrays
    out = {}
    for name, array in arrays.items():
        value = array.numpy()
        want = np.dtype(reference[name].dtype) if name in reference else value.dtype
        out[name] = Array(np.ascontiguousarray(value.astype(want, copy=False)))
    return ArrayRecord(out)
