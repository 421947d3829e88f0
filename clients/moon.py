"""MOON (Li, He and Song, CVPR 2021): model-contrastive federated learning, as one loss hook.

Each step adds mu·l_con to the cross-entropy, with z the representation the model feeds its
classifier, z_glob that of the received global model and z_prev that of this client's
model at the end of its previous round, all on the same batch:

    l_con = −log( exp(sim(z, z_glob)/τ) / (exp(sim(z, z_glob)/τ) + exp(sim(z, z_prev)/τ)) )

with sim the cosine similarity (paper, eq. 3). The global and previous models are fixed
targets (evaluation mode, no gradient). In a client's first round the previous model is the
global model, as in the authors' code (QinbinLi/MOON), which makes l_con's gradient zero.
The previous model is the client's state across rounds; the server side is plain FedAvg.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from flwr.app import ArrayRecord, RecordDict
from torch import nn

from clients.base import ClientPart
from fedpfn.core.settings import above, at_least, setting

PREVIOUS = "moon-previous"  # this client's model after its previous round


@dataclass(frozen=True)
class MoonParams:
    moon_mu: float = setting(1.0, "MOON contrastive loss weight mu", at_least(0))
    moon_temperature: float = setting(0.5, "MOON temperature tau", above(0))


class Representation:
    """Catches the input of a model's classifier: the representation MOON contrasts."""

    def __init__(self, model: nn.Module) -> None:
        self.value: torch.Tensor | None = None
        self.handle = model.classifier.register_forward_pre_hook(self._catch)

    def _catch(self, module: nn.Module, args: tuple[torch.Tensor, ...]) -> None:
        self.value = args[0].flatten(1)


def contrastive_loss(z: torch.Tensor, z_glob: torch.Tensor, z_prev: torch.Tensor, tau: float) -> torch.Tensor:
    """l_con of the paper, averaged over the batch."""
    logits = torch.stack([F.cosine_similarity(z, z_glob, dim=1), F.cosine_similarity(z, z_prev, dim=1)], 1) / tau
    return F.cross_entropy(logits, torch.zeros(len(z), dtype=torch.long, device=z.device))


class MoonClient(ClientPart):
    name = "moon"
    Params = MoonParams
    state_keys = (PREVIOUS,)

    def begin_round(self, model: nn.Module, content: RecordDict) -> None:
        self.global_model = self._frozen_copy(model, None)
        self.previous_model = self._frozen_copy(model, self.ctx.state.load(PREVIOUS))
        self.z = Representation(model)

    @staticmethod
    def _frozen_copy(model: nn.Module, weights: ArrayRecord | None) -> nn.Module:
        twin = copy.deepcopy(model)
        if weights is not None:
            twin.load_state_dict(weights.to_torch_state_dict())
        twin.eval().requires_grad_(False)
        return twin

    @torch.no_grad()
    def _target(self, model: nn.Module, inputs: torch.Tensor) -> torch.Tensor:
        catch = Representation(model)
        model(inputs)
        catch.handle.remove()
        assert catch.value is not None
        return catch.value

    def loss_term(self, model: nn.Module, inputs: torch.Tensor) -> torch.Tensor | None:
        mu = self.params.moon_mu
        if mu == 0 or self.z.value is None:
            return None
        z_glob = self._target(self.global_model, inputs)
        z_prev = self._target(self.previous_model, inputs)
        return mu * contrastive_loss(self.z.value, z_glob, z_prev, self.params.moon_temperature)

    def end_round(self, model: nn.Module, steps: int) -> None:
        self.z.handle.remove()
        self.ctx.state.save(PREVIOUS, ArrayRecord(model.state_dict()), self.ctx.server_round)
