"""Label flip: data poisoning, the labels a malicious client trains on mapped y -> C - 1 - y."""

from __future__ import annotations

import torch

from clients.attacks.base import Attack, attack


@attack
class LabelFlipAttack(Attack):
    """Trains on labels y -> C - 1 - y (C classes) and replies honestly; its local test split and
    federated evaluation keep the true labels."""

    name = "label-flip"

    def labels(self, targets: torch.Tensor, partitions: list[int], num_classes: int) -> torch.Tensor:
        flipped = [p in self.malicious for p in partitions]
        if not any(flipped):
            return targets
        flags = torch.tensor(flipped, device=targets.device)
        flags = flags.view(-1, *[1] * (targets.dim() - 1)) if targets.dim() > 1 else flags[0]
        return torch.where(flags, num_classes - 1 - targets, targets)
