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
   MetricRecord with `num-examples`; the parts' own records are taken out first. A strategy
   that aggregates by the example-weighted mean alone (registered `mean_based`: FedAvg and
   the FedOpt family, FedAvgM) is given one reply that holds the round's mean instead
   (`aggregate_totals`), which is what it would compute from the K replies.
4. Its result is cast back to each parameter's dtype and shape as sent (0-d arrays and
   float32 included), then the parts adjust it.
5. Its state is kept in checkpoints: its own `state()` / `load_state()` if it defines both;
   for Flower's built-ins the attributes declared with their registration (FedAvgM's
   momentum, FedOpt's moments); for any other class, its attributes that hold arrays or
   plain values.

The parts read the round through `RoundTotals` (strategies/totals.py): the grid's, with a
mean-based inner strategy (taken of the replies for a plain Flower grid, where the clients
trained for the batched engine); of the replies here, with any other.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, Message, MetricRecord, RecordDict
from flwr.serverapp import Grid
from flwr.serverapp.exception import AggregationError
from flwr.serverapp.strategy import Strategy

from fedpfn.core.flower_notes import ONE_MERGED_REPLY, flower_note_dropped
from fedpfn.core.protocol import ARRAYS, METRICS, NUM_EXAMPLES, Arrays, to_array_record, to_numpy
from fedpfn.core.user_code import call_user
from strategies.parts import ServerPart
from strategies.state import load_strategy_state, strategy_state
from strategies.totals import RoundTotals

T = TypeVar("T")


class ComposedStrategy(Strategy):
    """The inner strategy aggregates the parameters; the parts add the algorithm's server rules."""

    def __init__(
        self,
        inner: Strategy,
        parts: Sequence[ServerPart],
        param_names: Sequence[str],
        state_attributes: Sequence[str] | None = None,
        timeout: float | None = None,
    ) -> None:
        """`state_attributes`: the inner strategy's state as its registration declares it
        (None: a user's class, whose state is found as guarantee 5 says, and whose hooks are
        bounded by `timeout`, the round's: `_inner`)."""
        self.inner = inner
        self.timeout = timeout
        self.parts = list(parts)
        self.param_names = list(param_names)
        self.state_attributes = state_attributes
        self.sent: Arrays = {}
        self.restored: dict[int, ArrayRecord] = {}  # id(reply content) -> its whole model, this round

    # --- Strategy ------------------------------------------------------------------------

    def configure_train(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        self.sent = to_numpy(arrays)
        self.restored = {}
        params = ArrayRecord({name: arrays[name] for name in self.param_names})
        give_current_model(self.inner, params)
        entries = {k: v for part in self.parts for k, v in part.config_entries(server_round).items()}
        config = ConfigRecord({**config, **entries})
        configure = lambda: list(self.inner.configure_train(server_round, params, config, grid))  # noqa: E731
        messages = self._inner("configure_train", server_round, configure)
        records = {k: r for part in self.parts for k, r in part.records(server_round, self.sent).items()}
        for message in messages:
            message.content[ARRAYS] = arrays  # the whole model: clients need the buffers too
            for key, record in records.items():
                message.content[key] = record
        return messages

    def aggregate_train(
        self, server_round: int, replies: Iterable[Message]
    ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        """The replies as received, one per client: the inner strategy sees each."""
        replies = list(replies)
        self.restore(server_round, [reply.content for reply in replies if not reply.has_error()])
        return self.aggregate_restored(server_round, replies)

    def restore(self, server_round: int, contents: list[RecordDict]) -> None:
        """The replies in their full form, in place: FedPNU's unpacked, personal entries filled.

        Their whole models are kept for `client_models` until the next round: aggregation leaves
        the replies holding the inner strategy's slim copies."""
        for part in reversed(self.parts):
            part.restore(server_round, contents, self.sent)
        self.restored = {id(content): content[ARRAYS] for content in contents if ARRAYS in content.array_records}

    def aggregate_restored(
        self, server_round: int, replies: list[Message]
    ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        """`aggregate_train` of replies `restore` has seen (a wrapper clipped them in between)."""
        good = [reply.content for reply in replies if not reply.has_error()]
        totals = RoundTotals.of_replies([RecordDict({**c}) for c in good], self.sent, self.param_names)
        for content in good:  # the inner's own slim copy (FedMedian, Krum pop what they read)
            record = content[ARRAYS]
            for key in list(content.array_records):
                del content[key]
            content[ARRAYS] = ArrayRecord({name: record[name] for name in self.param_names})
        aggregate = lambda: self.inner.aggregate_train(server_round, replies)  # noqa: E731
        aggregated, metrics = self._inner("aggregate_train", server_round, aggregate)
        return self._complete(server_round, aggregated, metrics, totals)

    def aggregate_totals(
        self, server_round: int, totals: RoundTotals, replies: list[Message]
    ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        """A round given as its totals (guarantee 3's one reply); for mean-based inner strategies.

        `replies` are the round's, with or without arrays: those with arrays are restored in place
        first, so totals taken of them (`RoundTotals.of_replies`) read whole models, and so do
        `client_models`."""
        self.restore(server_round, [reply.content for reply in replies if not reply.has_error()])
        metrics = MetricRecord({**totals.metrics, NUM_EXAMPLES: totals.examples})
        params = to_array_record(totals.param_mean)
        merged = Message(RecordDict({ARRAYS: params, METRICS: metrics}), reply_to=replies[0])
        with flower_note_dropped(ONE_MERGED_REPLY):  # Flower would count the merged reply: no reply is lost
            aggregate = lambda: self.inner.aggregate_train(server_round, [merged])  # noqa: E731
            aggregated, metrics = self._inner("aggregate_train", server_round, aggregate)
        return self._complete(server_round, aggregated, metrics, totals)

    def _inner(self, hook: str, server_round: int, call: Callable[[], T]) -> T:
        """`call()`, the inner strategy's `hook`: a user's class's within the round's timeout, what
        it raises one line naming it (fedpfn.core.user_code.call_user); Flower's own as they are."""
        if self.state_attributes is not None:  # registered: Flower's own
            return call()
        path = f"{type(self.inner).__module__}:{type(self.inner).__qualname__}"
        return call_user(f"server: {path}'s {hook} in round {server_round}", self.timeout, call)

    def _complete(
        self, server_round: int, aggregated: ArrayRecord | None, metrics: MetricRecord | None, totals: RoundTotals
    ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        """The parts' state from the totals, then the new model: parameters adjusted, buffers averaged."""
        for part in reversed(self.parts):
            part.absorb(server_round, totals, self.sent)
        if aggregated is None:
            return None, metrics
        params = conform(to_numpy(aggregated), {n: self.sent[n] for n in self.param_names})
        for part in self.parts:
            params = part.adjust(server_round, params, self.sent, totals)
        merged = {name: params[name] if name in params else totals.buffer_mean[name] for name in self.sent}
        return to_array_record(merged, keep_decoded=True), metrics  # the new global model

    def client_models(self, server_round: int, replies: list[Message]) -> list[Arrays]:
        """Each reply's whole model as the client trained it (FedPNU's packed entries restored),
        the replies left as they are; after aggregation, the models `restore` kept (restoring the
        replies twice would unpack FedPNU's entries twice)."""
        kept = [self.restored.get(id(reply.content)) for reply in replies]
        if replies and all(record is not None for record in kept):
            return [to_numpy(record) for record in kept]  # type: ignore[arg-type]
        copies = [RecordDict({ARRAYS: reply.content[ARRAYS]}) for reply in replies]
        for part in reversed(self.parts):
            part.restore(server_round, copies, self.sent)
        return [to_numpy(content[ARRAYS]) for content in copies]

    def configure_evaluate(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        return []  # the server evaluates the global model itself

    def aggregate_evaluate(self, server_round: int, replies: Iterable[Message]) -> MetricRecord | None:
        return None

    def summary(self) -> None:
        self.inner.summary()

    # --- checkpoints ---------------------------------------------------------------------

    def state(self) -> dict[str, Any]:
        return {
            "inner": strategy_state(self.inner, self.state_attributes),
            "parts": [part.state() for part in self.parts],
        }

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
