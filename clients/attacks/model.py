"""Model poisoning: what a malicious client sends, in place of the model it trained."""

from __future__ import annotations

import torch

from clients.attacks.base import MALICIOUS, Attack
from clients.base import ClientRound
from fedpfn.core.training import Tensors


class ModelAttack(Attack):
    """An attack on the reply: composed after every other part of the client (its rule, its
    anchors), so `uploaded` sees what the client would send and replaces it for the malicious
    clients alone (`torch.where` on a per-client flag: the honest ones' replies are bit for bit
    what they would be). Buffers (BatchNorm statistics) and the records a rule adds (SCAFFOLD's
    Δc) are sent as trained; FedPNU's attackers leave out the anchored entries like everyone else."""

    def inputs(self, client: ClientRound) -> Tensors:
        like = next(iter(self.round.start.values()))
        return {MALICIOUS: torch.tensor(client.partition_id in self.malicious, device=like.device)}

    def sent(
        self, received: torch.Tensor, trained: torch.Tensor, name: str, per_client: Tensors
    ) -> torch.Tensor:
        """What a malicious client sends for the parameter `name`: g = `received`, w = `trained`
        (S is `self.hyper.scale`); a function of one client's tensors, vmapped in a cohort."""
        raise NotImplementedError(f"{type(self).__name__}.sent: a model attack says what a malicious client sends")

    def uploaded(self, params: Tensors, per_client: Tensors) -> Tensors:
        start, flag = self.round.start, per_client[MALICIOUS]
        return {
            name: torch.where(flag, self.sent(start[name], trained, name, per_client), trained)
            for name, trained in params.items()
        }
