"""FedNova (Wang et al., NeurIPS 2020): normalised averaging, so clients that take more local
steps do not pull the global model further.

Client i runs τ_i local steps of SGD with momentum ρ; its update normalised by

    a_i = (τ_i − ρ(1 − ρ^τ_i)/(1 − ρ)) / (1 − ρ)        (a_i = τ_i for plain SGD; paper, eq. 9)

is d_i = (x − y_i)/a_i. The reply carries x − d_i in place of its trained parameters (the
normalised model) and a_i as the metric NORMALISER, so the inner strategy's example-weighted
mean is x − Σ p_i d_i; the server (strategies/fednova.py) rescales the step by
τ_eff = Σ p_i a_i:

    x⁺ = x − τ_eff · Σ p_i d_i        p_i = n_i / Σ n_j (the round's replies)

With FedAvg that is FedNova exactly; a server optimizer takes its step on the normalised
pseudo-gradient, scaled by τ_eff. Buffers are sent as trained. Adam's steps have no
normaliser of this form, so FedNova is defined for SGD only.
"""

from __future__ import annotations

import torch

from clients.base import ClientRound, ClientRule, client_rule
from fedpfn.core.training import Tensors, effective_steps

NORMALISER = "fednova-a"  # METRICS entry, client -> server: this client's a_i


@client_rule
class FedNovaClient(ClientRule):
    name = "fednova"
    reply_metrics = (NORMALISER,)
    optimizers = ("sgd",)

    def inputs(self, client: ClientRound) -> Tensors:
        a = effective_steps(client.steps, self.round.cfg.local.momentum)
        like = next(iter(self.round.start.values()))
        return {NORMALISER: torch.tensor(a, dtype=like.dtype, device=like.device)}

    def outputs(self, trained, per_client: Tensors) -> Tensors:
        return {NORMALISER: per_client[NORMALISER]}

    def uploaded(self, params: Tensors, per_client: Tensors) -> Tensors:
        start = self.round.start
        return {name: start[name] + (p - start[name]) / per_client[NORMALISER] for name, p in params.items()}
