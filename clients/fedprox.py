"""FedProx (Li et al., MLSys 2020): local SGD plus a proximal term (mu/2)·||w − w_global||²."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from clients.base import ClientPart
from fedpfn.core.settings import at_least, setting


@dataclass(frozen=True)
class FedProxParams:
    prox_mu: float = setting(0.01, "FedProx proximal coefficient mu", at_least(0))


class FedProxClient(ClientPart):
    """FedAvg's loop with the proximal term added to every step's loss."""

    name = "fedprox"
    Params = FedProxParams

    def loss_term(self, model: nn.Module, inputs: torch.Tensor) -> torch.Tensor | None:
        mu = self.params.prox_mu
        if mu == 0:
            return None
        start = self.ctx.global_params
        prox = sum((p - start[name]).pow(2).sum() for name, p in model.named_parameters())
        return 0.5 * mu * prox
