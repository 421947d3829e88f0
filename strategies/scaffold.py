"""SCAFFOLD's server state: the control variate c, around any inner strategy.

c (parameters only, float32, zeros at the start) travels to every selected client as the
record SCAFFOLD_C. Each reply's Δc_i (record SCAFFOLD_DELTA) is taken out before the inner
strategy aggregates, and c ← c + (1/N)·Σ Δc_i with N = num_clients (option II of the
paper). The model itself is aggregated by the inner strategy (FedAvg: global step size 1).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from flwr.app import ArrayRecord, RecordDict

from fedpfn.core.protocol import SCAFFOLD_C, SCAFFOLD_DELTA, Arrays, to_array_record, to_numpy
from strategies.parts import ServerPart


class ScaffoldServer(ServerPart):
    c: Arrays | None = None

    def _c(self, sent: Arrays) -> Arrays:
        if self.c is None:
            names = [name for name, _ in self.ctx.model.named_parameters()]
            self.c = {name: np.zeros(sent[name].shape, dtype=np.float32) for name in names}
        return self.c

    def records(self, server_round: int, sent: Arrays) -> dict[str, ArrayRecord]:
        return {SCAFFOLD_C: to_array_record(self._c(sent))}

    def absorb(self, server_round: int, replies: list[RecordDict], sent: Arrays) -> None:
        c = self._c(sent)
        total = {name: np.zeros(value.shape, dtype=np.float64) for name, value in c.items()}
        for content in replies:
            delta = to_numpy(content.array_records[SCAFFOLD_DELTA])
            del content[SCAFFOLD_DELTA]
            for name in total:
                total[name] += delta[name]
        n = self.ctx.cfg.num_clients
        self.c = {name: (value + total[name] / n).astype(np.float32) for name, value in c.items()}

    def state(self) -> dict[str, Any]:
        return {"c": self.c}

    def load_state(self, state: dict[str, Any]) -> None:
        self.c = state["c"]
