"""Sign flip: the update reversed, S times over."""

from __future__ import annotations

import torch

from clients.attacks.base import attack
from clients.attacks.model import ModelAttack
from fedpfn.core.training import Tensors


@attack
class SignFlipAttack(ModelAttack):
    """Sends g - S (w - g) (S = 1: the update reversed)."""

    name = "sign-flip"
    default_scale = 1.0

    def sent(
        self, received: torch.Tensor, trained: torch.Tensor, name: str, per_client: Tensors
    ) -> torch.Tensor:
        return received - self.hyper.scale * (trained - received)
