"""What the server parts read of a round's replies: sums and example-weighted means.

Every server part aggregates linearly (SCAFFOLD sums the Δc_i, FedDyn the updates, FedNova
and the anchors take example-weighted means, buffers are example-weighted means), so a part
reads `RoundTotals`, never the replies themselves. There is one arithmetic, over the
round's clients stacked (client first), with two sources:

- the replies the server received: `of_replies`, which a plain Flower grid's round comes with
  (Ray, deployment: fedpfn.runtime.transport.PlainGrid) and a strategy that reads the replies
  (robust ones, wrappers) takes itself;
- the batched engine's cohort, where the clients trained, so a round of K clients is never
  K serialised models (fedpfn.runtime.engines.grid).

Sums run in the dtypes Flower's FedAvg and the server parts use, on the CPU client after
client in the replies' order (`client_sum`), so a round aggregates to the same bits from
either source.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from functools import cached_property

import numpy as np
import torch
from flwr.app import RecordDict

from fedpfn.core.protocol import ARRAYS, METRICS, NUM_EXAMPLES, Arrays
from fedpfn.core.training import torch_threads

Tensors = dict[str, torch.Tensor]
Stacks = tuple[Tensors, Tensors, Mapping[str, Tensors]]  # params, buffers, records: client first
Term = Callable[[int | slice, torch.Tensor], torch.Tensor]  # (client k, its stacked entry) -> what it adds


class RoundTotals:
    """A round's successful replies, stacked, as the server parts need them."""

    def __init__(
        self,
        stacks: Callable[[], Stacks],
        metrics: Sequence[Mapping[str, object]],
        sent: Arrays,
        param_names: Sequence[str],
    ) -> None:
        """`stacks`: (params, buffers, records) stacked over the replies, made when a part first
        reads them (a round whose parts read nothing stacks nothing); `metrics`: each reply's
        METRICS; `param_names`: the model's parameters."""
        self._stacks, self.sent, self.param_names = stacks, sent, list(param_names)
        self.reply_metrics = list(metrics)
        self.weights = np.array([float(m[NUM_EXAMPLES]) for m in self.reply_metrics])  # type: ignore[arg-type]

    @classmethod
    def of_replies(cls, replies: Sequence[RecordDict], sent: Arrays, param_names: Sequence[str]) -> RoundTotals:
        """The totals of replies received (a plain Flower grid's round): their records are read
        when a total is first read, so the server restores the replies in place before (FedPNU's
        unpacked, personal entries filled: ComposedStrategy.restore). Whoever changes the
        replies after that hands in copies (`RecordDict({**content})`)."""
        replies = list(replies)

        def stack(key: str, name: str) -> torch.Tensor:
            return torch.stack([torch.from_numpy(content[key][name].numpy()) for content in replies])

        def stacks() -> Stacks:
            received = [content.array_records for content in replies]
            if not received:
                return {}, {}, {}
            parameters = set(param_names)
            buffers = [name for name in sent if name not in parameters]
            keys = [key for key in received[0] if key != ARRAYS]
            records = {key: {name: stack(key, name) for name in received[0][key]} for key in keys}
            return {n: stack(ARRAYS, n) for n in param_names}, {n: stack(ARRAYS, n) for n in buffers}, records

        return cls(stacks, [dict(content[METRICS]) for content in replies], sent, param_names)

    @cached_property
    def _stacked(self) -> Stacks:
        return self._stacks()

    @property
    def params(self) -> Tensors:
        return self._stacked[0]

    @property
    def buffers(self) -> Tensors:
        return self._stacked[1]

    @property
    def records(self) -> Mapping[str, Tensors]:
        return self._stacked[2]

    @property
    def replies(self) -> int:
        """How many replies the totals cover."""
        return len(self.reply_metrics)

    @property
    def examples(self) -> float:
        """Σ n_k, the replies' `num-examples`."""
        return float(self.weights.sum())

    def _factors(self, like: torch.Tensor, dtype: torch.dtype, scale: bool) -> torch.Tensor:
        """Per-reply weights shaped to broadcast over `like`: w_k / Σw (Flower's) or w_k."""
        values = self.weights / self.weights.sum() if scale else self.weights
        return torch.tensor(values, dtype=dtype, device=like.device).view(-1, *[1] * (like.dim() - 1))

    @cached_property
    def param_mean(self) -> Arrays:
        """The example-weighted mean of the parameters as Flower's FedAvg takes it: Σ x_k · (w_k / Σw)
        in their dtype (float32), reply after reply."""
        out = {}
        for name, stack in self.params.items():
            factors = self._factors(stack, stack.dtype, scale=True)
            out[name] = client_sum(stack, lambda k, x, f=factors: x * f[k]).cpu().numpy()
        return out

    @cached_property
    def buffer_mean(self) -> Arrays:
        """The example-weighted mean of the buffers: Σ w_k · x_k / Σw in float64, back in the dtypes
        sent (integer counters rounded)."""
        out = {}
        for name, stack in self.buffers.items():
            factors = self._factors(stack, torch.float64, scale=False)
            total = client_sum(stack, lambda k, x, f=factors: x.to(torch.float64) * f[k])
            mean = total.cpu().numpy() / self.weights.sum()
            like = self.sent[name]
            out[name] = np.asarray(np.rint(mean) if np.issubdtype(like.dtype, np.integer) else mean).astype(like.dtype)
        return out

    @cached_property
    def update_sum(self) -> Arrays:
        """Σ_k (w_k − w_sent) over the parameters, in float64 (unweighted)."""
        if not self.params:
            return {name: np.zeros(self.sent[name].shape, dtype=np.float64) for name in self.param_names}
        out = {}
        for name, stack in self.params.items():
            sent = torch.from_numpy(self.sent[name]).to(stack.device, torch.float64)
            out[name] = client_sum(stack, lambda k, x, s=sent: x.to(torch.float64) - s).cpu().numpy()
        return out

    def record_sum(self, key: str, like: Arrays) -> Arrays:
        """Σ_k of the replies' record `key`, in float64, shaped like `like` (zeros without replies)."""
        stacks = self.records.get(key)
        if not stacks:
            return {name: np.zeros(value.shape, dtype=np.float64) for name, value in like.items()}
        return {name: client_sum(stacks[name], lambda k, x: x.to(torch.float64)).cpu().numpy() for name in like}

    def metric_mean(self, key: str) -> float:
        """The example-weighted mean of the replies' metric `key`."""
        return float(self.metrics[key])

    @cached_property
    def metrics(self) -> dict[str, float]:
        """The example-weighted mean of every numeric metric but `num-examples`, as Flower's
        FedAvg weighs them: Σ value · (n_k / Σn), in the replies' order."""
        total = float(sum(self.weights.tolist()))
        out: dict[str, float] = {}
        for metrics, weight in zip(self.reply_metrics, self.weights.tolist()):
            for key, value in metrics.items():
                if key != NUM_EXAMPLES and isinstance(value, int | float):
                    out[key] = value * (weight / total) if key not in out else out[key] + value * (weight / total)
        return out


def client_sum(stack: torch.Tensor, term: Term) -> torch.Tensor:
    """Σ_k term(k, stack[k]) over the first (client) dimension: one reduction on a GPU (`k` a slice
    of every client); on the CPU one addition per client in order, in the terms' dtype, as Flower
    sums replies (a reduction, or torch's cumsum, which accumulates float32 in float64, gives other
    bits). Each term is made as it is added (no stack of K terms is held), on one thread: every
    operation is element-wise, so the thread count changes no bit, and a busy machine cannot
    stall a round's hundreds of small additions on a second thread that lost its core."""
    if stack.device.type != "cpu":
        return term(slice(None), stack).sum(0)
    with torch_threads(1):
        total = term(0, stack[0]).clone()
        for k in range(1, len(stack)):
            total += term(k, stack[k])
    return total
