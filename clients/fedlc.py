"""FedLC (Zhang et al., ICML 2022, "Federated Learning with Label Distribution Skew via Logits
Calibration"): each client trains on its logits calibrated by its own label counts,

    L_cal(x, y) = −log( exp(f_y(x) − τ·n_y^(−1/4)) / Σ_c exp(f_c(x) − τ·n_c^(−1/4)) )

with n_c the number of its training examples of class c (paper, eq. 9). A rare class's logit
is pushed down more during training, so the client's model stops over-predicting its common
classes; a class it has none of leaves the sum (its calibrated logit is −∞), as in the
authors' form exp(f_c − τ·n_c^(−1/4)) = 0. The server is FedAvg's: FedLC is its criterion
alone. Evaluation uses the uncalibrated logits.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from clients.base import ClientRound, ClientRule, client_rule
from fedpfn.core.settings import above, setting
from fedpfn.core.training import Tensors

SHIFT = "fedlc-shift"  # this client's τ·n_c^(−1/4) per class (+∞ for a class it lacks)


@dataclass(frozen=True)
class FedLCParams:
    fedlc_tau: float = setting(1.0, "FedLC calibration strength tau", above(0))


@client_rule
class FedLCClient(ClientRule):
    name = "fedlc"
    Params = FedLCParams
    personal_start = True  # its hooks never read the global model as the client's start

    def inputs(self, client: ClientRound) -> Tensors:
        y = client.data.y[client.data.train.to(client.data.y.device)]
        counts = torch.bincount(y, minlength=client.data.num_classes).to(next(iter(self.round.start.values())))
        shift = self.hyper.fedlc_tau * counts.clamp(min=1).pow(-0.25)
        return {SHIFT: torch.where(counts > 0, shift, torch.inf)}

    def criterion(self, logits: torch.Tensor, targets: torch.Tensor, per_client: Tensors) -> torch.Tensor:
        return F.cross_entropy(logits - per_client[SHIFT], targets)
