"""MOON (Li, He and Song, CVPR 2021): model-contrastive federated learning, as one loss hook.

Each step adds mu·l_con to the cross-entropy, with z the representation the model feeds its
classifier, z_glob that of the received global model and z_prev that of this client's
model at the end of its previous round, all on the same batch:

    l_con = −log( exp(sim(z, z_glob)/τ) / (exp(sim(z, z_glob)/τ) + exp(sim(z, z_prev)/τ)) )

with sim the cosine similarity (paper, eq. 3). The global and previous models are fixed
targets (evaluation mode, no gradient). In a client's first round the previous model is the
global model, as in the authors' code (QinbinLi/MOON), which makes l_con's gradient zero.
The previous model is the client's state across rounds; the server side is plain FedAvg.

The paper's models carry a projection head (a 2-layer MLP to 256 dimensions) whose output
is the representation contrasted and the classifier's input: `--projection-head 256`
(fedpfn.core.models.WithProjectionHead). Without it the classifier's input is contrasted.
The paper's mu: 5 on CIFAR-10, 1 on CIFAR-100 and Tiny-ImageNet; tau 0.5.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from clients.base import Arrays, ClientRound, ClientRule, client_rule, prefixed, tensors_of, unprefixed
from fedpfn.core.protocol import to_array_record, to_numpy
from fedpfn.core.settings import above, at_least, setting
from fedpfn.core.training import StepView, Tensors, target_features

PREVIOUS = "moon-previous"  # this client's model after its previous round


@dataclass(frozen=True)
class MoonParams:
    moon_mu: float = setting(
        1.0, "MOON contrastive loss weight mu (the paper: 5 on CIFAR-10, 1 on CIFAR-100 and Tiny-ImageNet)", at_least(0)
    )
    moon_temperature: float = setting(0.5, "MOON temperature tau", above(0))


def contrastive_loss(z: torch.Tensor, z_glob: torch.Tensor, z_prev: torch.Tensor, tau: float) -> torch.Tensor:
    """l_con of the paper, averaged over the batch."""
    logits = torch.stack([F.cosine_similarity(z, z_glob, dim=1), F.cosine_similarity(z, z_prev, dim=1)], 1) / tau
    return F.cross_entropy(logits, torch.zeros(len(z), dtype=torch.long, device=z.device))


@client_rule
class MoonClient(ClientRule):
    name = "moon"
    Params = MoonParams
    state_keys = (PREVIOUS,)

    def inputs(self, client: ClientRound) -> Tensors:
        stored = client.state.load(PREVIOUS)
        if stored is None:  # the client's first round: the global model
            return {**prefixed("params", self.round.start), **prefixed("buffers", self.round.start_buffers)}
        saved = to_numpy(stored)
        return {
            **prefixed("params", tensors_of(saved, self.round.start)),
            **prefixed("buffers", tensors_of(saved, self.round.start_buffers)),
        }

    def loss_term(self, view: StepView, per_client: Tensors) -> torch.Tensor | None:
        mu = self.hyper.moon_mu
        if mu == 0:
            return None
        this_round = self.round
        z_glob = target_features(view.model, this_round.start, this_round.start_buffers, view.inputs)
        previous = unprefixed("params", per_client), unprefixed("buffers", per_client)
        z_prev = target_features(view.model, *previous, view.inputs)
        return mu * contrastive_loss(view.features, z_glob, z_prev, self.hyper.moon_temperature)

    def save_state(self, client: ClientRound, uploaded: Arrays, outputs: Arrays) -> None:
        client.state.save(PREVIOUS, to_array_record(uploaded), self.round.server_round)
