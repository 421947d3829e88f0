"""FedProx (Li et al., MLSys 2020): local SGD plus a proximal term (mu/2)·||w − w_global||²."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from clients.base import ClientRule, client_rule
from fedpfn.core.settings import at_least, setting
from fedpfn.core.training import StepView, Tensors


@dataclass(frozen=True)
class FedProxParams:
    """FedProx's one setting: the flag `--prox-mu`, `prox-mu=` in a run config, `fedprox.prox_mu`
    in config.json."""

    prox_mu: float = setting(0.01, "FedProx proximal coefficient mu", at_least(0))


@client_rule
class FedProxClient(ClientRule):
    """FedAvg's loop with the proximal term added to every step's loss."""

    name = "fedprox"
    Params = FedProxParams

    def loss_term(self, view: StepView, per_client: Tensors) -> torch.Tensor | None:
        mu = self.hyper.prox_mu
        if mu == 0:
            return None
        start = self.round.start
        prox = sum((p - start[name]).pow(2).sum() for name, p in view.params.items())
        return 0.5 * mu * prox
