"""FedProx (Li et al., 2020): local SGD plus a proximal term (mu/2)·||w − w_global||²."""

from __future__ import annotations

import torch
from torch import nn

from clients.base import FedAvgClient


class FedProxClient(FedAvgClient):
    """FedAvg's loop with the proximal term added to every step's loss (mu = cfg.prox_mu)."""

    def loss_term(self, model: nn.Module) -> torch.Tensor | None:
        extra = super().loss_term(model)
        mu = self.cfg.prox_mu
        if mu == 0:
            return extra
        prox = sum(
            (p - self.global_params[name]).pow(2).sum() for name, p in model.named_parameters()
        )
        prox = 0.5 * mu * prox
        return prox if extra is None else extra + prox
