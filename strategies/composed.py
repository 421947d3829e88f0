"""Any Flower strategy with an algorithm's server parts around it.

What this wrapper guarantees to the inner strategy (Flower's FedAvg, FedAvgM, FedAdam, ...
or a user's own):

1. It sees trainable parameters only. `arrays` in `configure_train` and the ArrayRecord of
   every reply it aggregates hold the model's parameters, never its buffers (BatchNorm
   running statistics and counters): a server optimizer has no business moving those.
   Buffers are averaged here, weighted by examples; integer counters stay integers.
2. Each round, before `configure_train`, an inner strategy with a `current_arrays`
   attribute (FedAvgM, FedOpt and user classes like them) has it set to the parameters
   actually sent, so its pseudo-gradient starts from the model the clients trained from,
   whatever the parts did to the previous aggregate.
3. The replies it aggregates carry exactly one ArrayRecord (`arrays`, full-size) and one
   MetricRecord with `num-examples`; the parts' own records are taken out first.
4. Its result is cast back to each parameter's dtype and shape as sent (0-d arrays and
   float32 included), then the parts adjust it.
5. Its state is kept in checkpoints: its own `state()` / `load_state()` if it defines both;
   for Flower's built-ins the attributes that carry state between rounds (FedAvgM's momentum,
   FedOpt's moments); for any other class, its attributes that hold arrays or plain values.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, Message, MetricRecord, RecordDict
from flwr.serverapp import Grid
from flwr.serverapp.exception import AggregationError
from flwr.serverapp.strategy import Strategy

from fedpfn.core.protocol import ARRAYS, METRICS, NUM_EXAMPLES, Arrays, to_array_record, to_numpy
from strategies.parts import ServerPart
from strategies.state import load_strategy_state, strategy_state


class ComposedStrategy(Strategy):
    """The inner strategy aggregates the parameters; the parts add the algorithm's server rules."""

    def __init__(self, inner: Strategy, parts: Sequence[ServerPart], param_names: Sequence[str]) -> None:
        self.inner = inner
        self.parts = list(parts)
        self.param_names = list(param_names)
        self.sent: Arrays = {}

    # --- Strategy ------------------------------------------------------------------------

    def configure_train(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        self.sent = to_numpy(arrays)
        params = ArrayRecord({name: arrays[name] for name in self.param_names})
        give_current_model(self.inner, params)
        entries = {k: v for part in self.parts for k, v in part.config_entries(server_round).items()}
        config = ConfigRecord({**config, **entries})
        messages = list(self.inner.configure_train(server_round, params, config, grid))
        records = {k: r for part in self.parts for k, r in part.records(server_round, self.sent).items()}
        for message in messages:
            message.content[ARRAYS] = arrays  # the whole model: clients need the buffers too
            for key, record in records.items():
                message.content[key] = record
        return messages

    def aggregate_train(
        self, server_round: int, replies: Iterable[Message]
    ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        replies = list(replies)
        good = [reply.content for reply in replies if not reply.has_error()]
        for part in reversed(self.parts):
            part.absorb(server_round, good, self.sent)
        buffers = self._take_buffers(good)
        kept = [content[ARRAYS] for content in good]
        for content, record in zip(good, kept):  # the inner's own copy: FedMedian, Krum pop what they read
            content[ARRAYS] = ArrayRecord(dict(record.items()))
        aggregated, metrics = self.inner.aggregate_train(server_round, replies)
        for content, record in zip(good, kept):  # the parts below read the replies again
            content[ARRAYS] = record
        if aggregated is None:
            return None, metrics
        params = conform(to_numpy(aggregated), {n: self.sent[n] for n in self.param_names})
        for part in self.parts:
            params = part.adjust(server_round, params, self.sent, good)
        merged = {name: params[name] if name in params else buffers[name] for name in self.sent}
        return to_array_record(merged), metrics

    def configure_evaluate(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        return []  # the server evaluates the global model itself

    def aggregate_evaluate(self, server_round: int, replies: Iterable[Message]) -> MetricRecord | None:
        return None

    def summary(self) -> None:
        self.inner.summary()

    # --- buffers -------------------------------------------------------------------------

    def _take_buffers(self, replies: list[RecordDict]) -> Arrays:
        """Remove the buffers from every reply and return their example-weighted mean."""
        names = [name for name in self.sent if name not in set(self.param_names)]
        weights = np.array([float(r.metric_records[METRICS][NUM_EXAMPLES]) for r in replies])
        collected: dict[str, list[np.ndarray]] = {name: [] for name in names}
        for content in replies:
            arrays = to_numpy(content.array_records[ARRAYS])
            for name in names:
                collected[name].append(arrays[name])
            content[ARRAYS] = to_array_record({n: arrays[n] for n in self.param_names})
        return {name: weighted_mean(collected[name], weights, self.sent[name]) for name in names}

    # --- checkpoints ---------------------------------------------------------------------

    def state(self) -> dict[str, Any]:
        return {"inner": strategy_state(self.inner), "parts": [part.state() for part in self.parts]}

    def load_state(self, state: dict[str, Any]) -> None:
        load_strategy_state(self.inner, state["inner"])
        for part, part_state in zip(self.parts, state["parts"], strict=True):
            part.load_state(part_state)

    def round_summary(self) -> dict[str, Any]:
        return {k: v for part in self.parts for k, v in part.round_summary().items()}


def give_current_model(inner: Strategy, params: ArrayRecord) -> None:
    """Guarantee 2: an inner strategy that keeps its own copy of the model gets the one sent."""
    if not hasattr(inner, "current_arrays"):
        return
    if isinstance(inner.current_arrays, dict):
        inner.current_arrays = to_numpy(params)
    else:
        inner.current_arrays = ArrayRecord(dict(params.items()))


def conform(arrays: Arrays, reference: Arrays) -> Arrays:
    """`arrays` with the dtype and shape of `reference`, name by name (guarantee 4)."""
    if set(arrays) != set(reference):
        missing, extra = sorted(set(reference) - set(arrays)), sorted(set(arrays) - set(reference))
        raise AggregationError(f"the inner strategy returned other arrays (missing {missing}, extra {extra})")
    out = {}
    for name, ref in reference.items():
        value = np.asarray(arrays[name])
        if value.size != ref.size:
            raise AggregationError(f"the inner strategy returned '{name}' with shape {value.shape}, sent {ref.shape}")
        out[name] = value.astype(ref.dtype, copy=False).reshape(ref.shape)
    return out


def weighted_mean(values: list[np.ndarray], weights: np.ndarray, like: np.ndarray) -> np.ndarray:
    """The example-weighted mean, in float64, back in `like`'s dtype (integers rounded)."""
    total = sum(w * v.astype(np.float64) for w, v in zip(weights, values)) / weights.sum()
    if np.issubdtype(like.dtype, np.integer):
        total = np.rint(total)
    return np.asarray(total).astype(like.dtype).reshape(like.shape)
