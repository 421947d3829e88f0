"""Gaussian: an update of noise, seeded by round and partition."""

from __future__ import annotations

import torch

from clients.attacks.base import attack
from clients.attacks.model import ModelAttack
from clients.base import ClientRound
from fedpfn.core.seeding import Stream, torch_generator
from fedpfn.core.training import Tensors


@attack
class GaussianAttack(ModelAttack):
    """Sends g + S N(0, 1): the noise is each client's input (drawn on the host from the run seed,
    round and partition), so a cohort's program and the ClientApp send the same numbers."""

    name = "gaussian"
    default_scale = 1.0

    def inputs(self, client: ClientRound) -> Tensors:
        start = self.round.start
        seed, server_round = self.round.cfg.seed, self.round.server_round
        generator = torch_generator(seed, Stream.ATTACK, server_round, client.partition_id)
        noise = {
            f"noise.{name}": torch.randn(value.shape, generator=generator, dtype=value.dtype).to(value.device)
            for name, value in start.items()
        }
        return {**super().inputs(client), **noise}

    def sent(
        self, received: torch.Tensor, trained: torch.Tensor, name: str, per_client: Tensors
    ) -> torch.Tensor:
        return received + self.hyper.scale * per_client[f"noise.{name}"]
