"""FedDyn's server state h, around any inner strategy (Acar et al., ICLR 2021, Algorithm 1).

    h ← h − alpha·(1/N)·Σ_{k received} (w_k − w^{t−1})      N = num_clients
    w^t = mean(w_k) − h/alpha

`mean(w_k)` is whatever the inner strategy returns (FedAvg: the example-weighted mean; a
server optimizer: its step), and the correction touches parameters only, never BatchNorm
buffers. The authors' code (alpemreacar/FedDyn) and FL-bench's feddyn do the same with
an unweighted mean. The client side is clients/feddyn.py; alpha is its hyperparameter
(FedDynParams, handed to this part by the registry).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fedpfn.core.protocol import Arrays
from strategies.parts import ServerPart, server_part
from strategies.totals import RoundTotals


@server_part("feddyn")
class FedDynServer(ServerPart):
    h: Arrays | None = None

    def absorb(self, server_round: int, totals: RoundTotals, sent: Arrays) -> None:
        names = [name for name, _ in self.ctx.model.named_parameters()]
        h = self.h or {name: np.zeros(sent[name].shape, dtype=np.float32) for name in names}
        shift = totals.update_sum
        scale = self.hyper.feddyn_alpha / self.ctx.cfg.federation.num_clients
        self.h = {name: (value - scale * shift[name]).astype(np.float32) for name, value in h.items()}

    def adjust(self, server_round: int, params: Arrays, sent: Arrays, totals: RoundTotals) -> Arrays:
        alpha = self.hyper.feddyn_alpha
        assert self.h is not None  # absorb ran first
        return {
            name: (value - self.h[name] / alpha).astype(value.dtype, copy=False) if name in self.h else value
            for name, value in params.items()
        }

    def state(self) -> dict[str, Any]:
        return {"h": self.h}

    def load_state(self, state: dict[str, Any]) -> None:
        self.h = state["h"]
