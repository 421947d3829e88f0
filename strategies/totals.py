"""What the server parts read of a round's replies: sums and example-weighted means.

Every server part aggregates linearly (SCAFFOLD sums the Δc_i, FedDyn the updates, FedNova
and the anchors take example-weighted means, buffers are example-weighted means), so a part
reads `RoundTotals`, never the replies themselves. Two kinds give them:

- `ReplyTotals`: from the replies the server received (Ray, deployment, robust strategies),
  computed when first asked, with the arithmetic the parts always used;
- the batched engine's totals, computed where the clients trained, so a round of K clients
  is never K serialised models (fedpfn.runtime.engines.batched).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from functools import cached_property

import numpy as np
from flwr.app import ArrayRecord, RecordDict
from flwr.serverapp.strategy.strategy_utils import aggregate_arrayrecords, aggregate_metricrecords

from fedpfn.core.protocol import ARRAYS, METRICS, NUM_EXAMPLES, Arrays, to_numpy


class RoundTotals(ABC):
    """A round's successful replies, as the server parts need them."""

    @property
    @abstractmethod
    def replies(self) -> int:
        """How many replies the totals cover."""

    @property
    @abstractmethod
    def examples(self) -> float:
        """Σ n_k, the replies' `num-examples`."""

    @property
    @abstractmethod
    def param_mean(self) -> Arrays:
        """The example-weighted mean of the parameters, in the dtypes sent."""

    @property
    @abstractmethod
    def buffer_mean(self) -> Arrays:
        """The example-weighted mean of the buffers, in the dtypes sent (integer counters rounded)."""

    @property
    @abstractmethod
    def update_sum(self) -> Arrays:
        """Σ_k (w_k − w_sent) over the parameters, in float64 (unweighted)."""

    @abstractmethod
    def record_sum(self, key: str, like: Arrays) -> Arrays:
        """Σ_k of the replies' record `key`, in float64, shaped like `like` (zeros without replies)."""

    @abstractmethod
    def metric_mean(self, key: str) -> float:
        """The example-weighted mean of the replies' metric `key`."""

    @property
    @abstractmethod
    def metrics(self) -> dict[str, float]:
        """The example-weighted mean of every numeric metric but `num-examples` (FedAvg's train metrics)."""


class ReplyTotals(RoundTotals):
    """Totals of replies received, each a RecordDict with its full model (FedPNU's unpacked)."""

    def __init__(self, replies: Sequence[RecordDict], sent: Arrays, param_names: Sequence[str]) -> None:
        # the records as received: the composed strategy hands the inner strategy slimmer copies
        self._arrays = [content[ARRAYS] for content in replies]
        self._metric_records = [content[METRICS] for content in replies]
        self._records = [dict(content.array_records) for content in replies]
        self._sent = sent
        self._params = list(param_names)
        self._weights = np.array([float(m[NUM_EXAMPLES]) for m in self._metric_records])

    @property
    def replies(self) -> int:
        return len(self._arrays)

    @property
    def examples(self) -> float:
        return float(self._weights.sum())

    @cached_property
    def param_mean(self) -> Arrays:
        """As Flower's FedAvg averages them (float32 sums in reply order)."""
        if not self._arrays:
            return {}
        params = [
            RecordDict({ARRAYS: ArrayRecord({n: record[n] for n in self._params}), METRICS: metrics})
            for record, metrics in zip(self._arrays, self._metric_records)
        ]
        return to_numpy(aggregate_arrayrecords(params, NUM_EXAMPLES))

    @cached_property
    def buffer_mean(self) -> Arrays:
        """In float64, back in each buffer's dtype."""
        names = [n for n in self._sent if n not in set(self._params)]
        return {
            name: weighted_mean([record[name].numpy() for record in self._arrays], self._weights, self._sent[name])
            for name in names
        }

    @cached_property
    def update_sum(self) -> Arrays:
        total = {name: np.zeros(self._sent[name].shape, dtype=np.float64) for name in self._params}
        for record in self._arrays:
            for name in total:
                total[name] += record[name].numpy().astype(np.float64) - self._sent[name]
        return total

    def record_sum(self, key: str, like: Arrays) -> Arrays:
        total = {name: np.zeros(value.shape, dtype=np.float64) for name, value in like.items()}
        for records in self._records:
            arrays = to_numpy(records[key])
            for name in total:
                total[name] += arrays[name]
        return total

    def metric_mean(self, key: str) -> float:
        return float(self.metrics[key])

    @cached_property
    def metrics(self) -> dict[str, float]:
        contents = [RecordDict({METRICS: m}) for m in self._metric_records]
        return {k: v for k, v in aggregate_metricrecords(contents, NUM_EXAMPLES).items() if isinstance(v, int | float)}


def weighted_mean(values: list[np.ndarray], weights: np.ndarray, like: np.ndarray) -> np.ndarray:
    """The example-weighted mean, in float64, back in `like`'s dtype (integers rounded)."""
    total = sum(w * v.astype(np.float64) for w, v in zip(weights, values)) / weights.sum()
    if np.issubdtype(like.dtype, np.integer):
        total = np.rint(total)
    return np.asarray(total).astype(like.dtype).reshape(like.shape)
