"""How aligned a round's client models are, measured while the federation trains.

TNA-PFN's claim is about alignment: clients that share anchors stay in one basin, so their
average loses less. Every `alignment_every` rounds the server takes the trained models of the
round's first `alignment_clients` clients (in partition order) and measures, on a seeded
subset of its evaluation set, what fedpfn.analysis.fusion measures between independently
trained models: the loss and accuracy barrier along the straight line between each pair
(the mean over pairs), and the fusion gap, the clients' mean accuracy minus that of their
plain average. BatchNorm statistics of every interpolated or averaged model are recomputed
on fixed training batches (fusion.reset_bn_stats). The figures join the round's row in
metrics.jsonl as `align_*`.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from fedpfn.analysis.fusion import Probe, analyse, has_batchnorm
from fedpfn.core.cache import dataset_on, initial_model
from fedpfn.core.config import RunConfig
from fedpfn.core.seeding import Stream, torch_generator

POINTS = 5  # points on each line between two models, both ends included
BN_BATCHES, BN_BATCH_SIZE = 5, 100  # training batches that BatchNorm statistics are recomputed on
PREFIX = "align_"


def due(cfg: RunConfig, server_round: int) -> bool:
    return bool(cfg.alignment_every) and server_round % cfg.alignment_every == 0


class AlignmentProbe:
    """The server's instrument: a model skeleton and the fixed samples every measurement uses."""

    def __init__(self, cfg: RunConfig, device: torch.device, eval_x: torch.Tensor, eval_y: torch.Tensor) -> None:
        self.cfg = cfg
        self.device = device
        order = torch.randperm(len(eval_y), generator=torch_generator(cfg.seed, Stream.ALIGNMENT, 0))
        chosen = order[: cfg.alignment_samples].to(eval_x.device)
        model = initial_model(cfg).to(device)
        bn_x, bn_batches = None, ()
        if has_batchnorm(model):
            train_x = dataset_on(cfg, device).train_x
            pool = torch.randperm(len(train_x), generator=torch_generator(cfg.seed, Stream.ALIGNMENT, 1))
            bn_x, bn_batches = train_x, tuple(pool[: BN_BATCHES * BN_BATCH_SIZE].split(BN_BATCH_SIZE))
        self.probe = Probe(model, eval_x[chosen], eval_y[chosen], bn_x, bn_batches)

    def measure(self, models: list[dict[str, np.ndarray]]) -> dict[str, Any]:
        """The `align_*` figures of the first `alignment_clients` of `models` (at least two)."""
        chosen = models[: self.cfg.alignment_clients]
        states = [{name: torch.from_numpy(np.asarray(a)).to(self.device) for name, a in m.items()} for m in chosen]
        result = analyse(self.probe, states, POINTS)
        figures = {
            "loss_barrier": result["loss_barrier"],
            "acc_barrier": result["acc_barrier"],
            "fusion_gap": result["fusion_gap"],
            "mean_client_acc": result["mean_individual_acc"],
            "fused_acc": result["fused_acc"],
            "clients": len(states),
        }
        return {PREFIX + key: value for key, value in figures.items()}
