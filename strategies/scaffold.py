"""SCAFFOLD's server state: the control variate c, around any Flower strategy.

c (parameters only, float32, zeros at the start) travels to every selected client as the
record `scaffold-c`. Each reply's Δc_i (record `scaffold-delta`) is removed before the
inner strategy aggregates, so Flower sees exactly one ArrayRecord per reply (its
`aggregate_arrayrecords` would otherwise average every ArrayRecord of a reply into the
model), and c ← c + (1/N)·Σ Δc_i with N = cfg.num_clients (option II of the paper).
The model itself is aggregated by the inner strategy (FedAvg: global step size 1).
"""

from __future__ import annotations

import numpy as np
import torch
from flwr.app import ArrayRecord, Message
from flwr.serverapp.strategy import Strategy

from clients.anchored import round_mask
from clients.scaffold import DELTA, SERVER_C
from fedpfn.anchors import mask_seed, unpack_free
from fedpfn.config import RunConfig
from fedpfn.records import to_array_record, to_numpy
from fedpfn.workspace import model_skeleton
from strategies.wrapper import StrategyWrapper


def parameter_zeros(cfg: RunConfig) -> dict[str, np.ndarray]:
    """float32 zeros shaped like the model's parameters (not its BatchNorm buffers)."""
    model = model_skeleton(cfg, torch.device("cpu"))
    return {name: np.zeros(tuple(p.shape), dtype=np.float32) for name, p in model.named_parameters()}


class ScaffoldServer(StrategyWrapper):
    def __init__(self, inner: Strategy, cfg: RunConfig) -> None:
        super().__init__(inner)
        self.cfg = cfg
        self.c: dict[str, np.ndarray] = parameter_zeros(cfg)

    def round_records(self, server_round: int, arrays: ArrayRecord) -> dict[str, ArrayRecord]:
        return {**super().round_records(server_round, arrays), SERVER_C: to_array_record(self.c)}

    def absorb_replies(self, server_round: int, replies: list[Message]) -> None:
        super().absorb_replies(server_round, replies)
        total = {name: np.zeros(c.shape, dtype=np.float64) for name, c in self.c.items()}
        for reply in replies:
            if DELTA not in reply.content.array_records:
                continue
            delta = to_numpy(reply.content.array_records[DELTA])
            del reply.content[DELTA]
            delta = self._unpacked(server_round, delta)
            for name in total:
                total[name] += delta[name]
        n = self.cfg.num_clients
        self.c = {name: (c + total[name] / n).astype(np.float32) for name, c in self.c.items()}

    def _unpacked(self, server_round: int, delta: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """FedPNU clients send Δc_i for trained entries only; anchored entries are 0."""
        if self.cfg.anchor_method != "fedpnu":
            return delta
        model = model_skeleton(self.cfg, torch.device("cpu"))
        mask = round_mask(model, self.cfg, mask_seed(self.cfg.seed, server_round, self.cfg.anchor_schedule))
        zeros = {name: np.zeros_like(c) for name, c in self.c.items()}
        return unpack_free(delta, zeros, mask)
