"""FedPFN and FedPNU on the client: the rule underneath trains with fixed neuron anchors.

Either method sits after any client rule (FedAvg, FedProx, SCAFFOLD, FedDyn, MOON, FedNova):
it rebuilds the round's mask from the seed the server sends (ANCHOR_SEED), takes the
received global weights as anchor values, marks them frozen for the rule, and puts them
back after every optimizer step. FedPNU (partial neuron update) also leaves the anchored
entries out of every array of its reply (`partial_upload`), since the server knows them
already. What both sides need, the settings (AnchorParams), the seed's message key and the
round's mask, lives in fedpfn.core.anchors; pack and unpack in fedpfn.core.protocol
(per-client parameters leave entries out of replies the same way).

`anchor_masks = client` is the study's control: each client draws a mask of its own (from
the round's seed and its partition id), so the same fraction of weights is frozen during
local training but no entry is shared between clients. It tells "shared anchors align
clients" apart from "freezing some weights regularises".
"""

from __future__ import annotations

from typing import ClassVar

from clients.base import Arrays, ClientRound, ClientRule, Round, anchor_method, prefixed, unprefixed
from fedpfn.core.anchors import ANCHOR_SEED, AnchorParams, as_numpy, round_mask
from fedpfn.core.arms import INDEPENDENT, SHARED, masks_word
from fedpfn.core.protocol import CONFIG
from fedpfn.core.seeding import Stream, seed_for
from fedpfn.core.training import Tensors, freeze


@anchor_method
class FedPFNClient(ClientRule):
    """Partially fixed neurons: weight-level anchors by default, full upload."""

    name = "fedpfn"
    Params = AnchorParams
    default_granularity: ClassVar[str] = "weight"
    partial_upload: ClassVar[bool] = False  # replies leave the anchored entries out
    personal_start = True  # it freezes anchors at the global values, and no personal entry is one

    def __init__(self, this_round: Round) -> None:
        super().__init__(this_round)
        self.seed = int(this_round.content.config_records[CONFIG][ANCHOR_SEED])
        self.shared = self.hyper.anchor_masks == masks_word(SHARED)
        if self.shared:
            self.mask = round_mask(this_round.model, self.hyper, self.seed, this_round.personal)
            self.on_device = {name: m.to(this_round.start[name].device) for name, m in self.mask.items()}

    def inputs(self, client: ClientRound) -> Tensors:
        if self.shared:
            return {}
        seed = seed_for(self.round.cfg.seed, Stream.CLIENT_MASK, self.seed, client.partition_id)
        mask = round_mask(self.round.model, self.hyper, seed, self.round.personal)
        return prefixed("mask", {name: m.to(self.round.start[name].device) for name, m in mask.items()})

    def frozen(self, per_client: Tensors) -> Tensors:
        return self.on_device if self.shared else unprefixed("mask", per_client)

    def after_step(self, params: Tensors, per_client: Tensors) -> Tensors:
        return freeze(params, self.round.start, self.frozen(per_client))

    def upload_mask(self) -> Arrays | None:
        return as_numpy(self.mask) if self.partial_upload else None


@anchor_method
class FedPNUClient(FedPFNClient):
    """Partial neuron update: neuron-level anchors by default, only trained entries uploaded."""

    name = "fedpnu"
    default_granularity = "neuron"
    partial_upload = True

    @classmethod
    def problems(cls, hyper: AnchorParams) -> list[str]:
        if hyper.anchor_masks == masks_word(INDEPENDENT):
            return ["anchor_masks: 'client' is for fedpfn: FedPNU's replies leave out entries the server must know"]
        return []
