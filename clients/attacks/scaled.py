"""Scaled: the update S times over (model replacement)."""

from __future__ import annotations

import torch

from clients.attacks.base import attack
from clients.attacks.model import ModelAttack
from fedpfn.core.training import Tensors


@attack
class ScaledAttack(ModelAttack):
    """Sends g + S (w - g)."""

    name = "scaled"
    default_scale = 10.0

    def sent(
        self, received: torch.Tensor, trained: torch.Tensor, name: str, per_client: Tensors
    ) -> torch.Tensor:
        return received + self.hyper.scale * (trained - received)
