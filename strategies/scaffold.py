"""SCAFFOLD's server state: the control variate c, around any inner strategy.

c (parameters only, float32, zeros at the start) travels to every selected client as the
record SCAFFOLD_C. The replies' Δc_i (record SCAFFOLD_DELTA) are summed, and
c ← c + (1/N)·Σ Δc_i with N = num_clients (option II of the paper). The model itself is
aggregated by the inner strategy (FedAvg: global step size 1). Record names and the
client's rule: clients/scaffold.py.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from flwr.app import ArrayRecord

from clients.scaffold import SCAFFOLD_C, SCAFFOLD_DELTA
from fedpfn.core.protocol import Arrays, to_array_record
from strategies.parts import ServerPart, server_part
from strategies.totals import RoundTotals


@server_part("scaffold")
class ScaffoldServer(ServerPart):
    c: Arrays | None = None

    def _c(self, sent: Arrays) -> Arrays:
        if self.c is None:
            names = [name for name, _ in self.ctx.model.named_parameters()]
            self.c = {name: np.zeros(sent[name].shape, dtype=np.float32) for name in names}
        return self.c

    def records(self, server_round: int, sent: Arrays) -> dict[str, ArrayRecord]:
        return {SCAFFOLD_C: to_array_record(self._c(sent))}

    def absorb(self, server_round: int, totals: RoundTotals, sent: Arrays) -> None:
        c = self._c(sent)
        total = totals.record_sum(SCAFFOLD_DELTA, like=c)
        n = self.ctx.cfg.federation.num_clients
        self.c = {name: (value + total[name] / n).astype(np.float32) for name, value in c.items()}

    def state(self) -> dict[str, Any]:
        return {"c": self.c}

    def load_state(self, state: dict[str, Any]) -> None:
        self.c = state["c"]
