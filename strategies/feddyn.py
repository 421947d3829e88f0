"""FedDyn's server state h, around any Flower strategy (Acar et al., ICLR 2021, Algorithm 1).

    h ← h − alpha·(1/N)·Σ_{k received} (w_k − w^{t−1})      N = cfg.num_clients
    w^t = mean(w_k) − h/alpha

`mean(w_k)` is whatever the inner strategy returns (FedAvg: the example-weighted mean; a
server optimizer: its step), and the correction touches parameters only, never BatchNorm
buffers. The authors' code (alpemreacar/FedDyn) and FL-bench's feddyn do the same with
an unweighted mean. h is float32 numpy, so checkpoints pickle it.
"""

from __future__ import annotations

import numpy as np
from flwr.app import Array, ArrayRecord, Message
from flwr.serverapp.strategy import Strategy

from fedpfn.config import RunConfig
from fedpfn.records import to_numpy
from strategies.scaffold import parameter_zeros
from strategies.wrapper import StrategyWrapper


class FedDynServer(StrategyWrapper):
    def __init__(self, inner: Strategy, cfg: RunConfig) -> None:
        super().__init__(inner)
        self.cfg = cfg
        self.h: dict[str, np.ndarray] = parameter_zeros(cfg)

    def absorb_replies(self, server_round: int, replies: list[Message]) -> None:
        super().absorb_replies(server_round, replies)
        sent = to_numpy(self.sent_arrays)
        shift = {name: np.zeros(h.shape, dtype=np.float64) for name, h in self.h.items()}
        for reply in replies:
            local = reply.content.array_records["arrays"]
            for name in shift:
                shift[name] += local[name].numpy().astype(np.float64) - sent[name]
        scale = self.cfg.feddyn_alpha / self.cfg.num_clients
        self.h = {name: (h - scale * shift[name]).astype(np.float32) for name, h in self.h.items()}

    def adjust_aggregate(self, server_round: int, arrays: ArrayRecord) -> ArrayRecord:
        arrays = super().adjust_aggregate(server_round, arrays)
        alpha = self.cfg.feddyn_alpha
        out = {}
        for name, array in arrays.items():
            value = array.numpy()
            if name in self.h:
                value = (value - self.h[name] / alpha).astype(value.dtype, copy=False)
            out[name] = Array(np.ascontiguousarray(value))
        return ArrayRecord(out)
