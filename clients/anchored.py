"""FedPFN and FedPNU on the client: the rule underneath trains with fixed neuron anchors.

Either part sits after any client rule (FedAvg, FedProx, SCAFFOLD, FedDyn, MOON): it
rebuilds the round's mask from the seed the server sends, takes the received global weights
as anchor values, marks them frozen for the rule, and restores them after every optimizer
step. FedPNU also packs every array of the reply down to the entries that trained, since
the server knows the rest already (strategies/anchored.py unpacks them).
"""

from __future__ import annotations

from flwr.app import RecordDict
from torch import nn

from clients.base import ClientPart
from fedpfn.core.anchors import AnchorFreeze, AnchorParams, as_numpy
from fedpfn.core.protocol import ANCHOR_SEED, CONFIG, pack_reply, round_mask


class FedPFN(ClientPart):
    """Partially fixed neurons: weight-level anchors by default, full upload."""

    name = "fedpfn"
    Params = AnchorParams
    default_granularity = "weight"
    partial_upload = False

    def begin_round(self, model: nn.Module, content: RecordDict) -> None:
        seed = int(content.config_records[CONFIG][ANCHOR_SEED])
        self.mask = round_mask(model, self.params, seed)
        self.freeze = AnchorFreeze(model, self.mask)
        self.ctx.frozen.update(self.mask)

    def after_step(self, model: nn.Module) -> None:
        self.freeze.restore()

    def finish_reply(self, reply: RecordDict) -> None:
        if self.partial_upload:
            pack_reply(reply, as_numpy(self.mask))


class FedPNU(FedPFN):
    """Partial neuron update: neuron-level anchors by default, only trained entries uploaded."""

    name = "fedpnu"
    default_granularity = "neuron"
    partial_upload = True
