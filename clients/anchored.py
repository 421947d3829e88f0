"""FedPFN and FedPNU: the client rule underneath trains with fixed neuron anchors.

Both are mixins over any client rule (FedAvg, FedProx, SCAFFOLD, FedDyn): they rebuild
the round's mask from the seed the server sends, take the received global weights as
anchor values, and restore the anchors after every optimizer step. FedPNU also uploads
only the entries that trained, since the server knows the rest already.
"""

from __future__ import annotations

from functools import lru_cache

from flwr.app import ArrayRecord, ConfigRecord, RecordDict
from torch import nn

from clients.base import FedAvgClient
from fedpfn.anchors import AnchorFreeze, AnchorMask, draw_mask, pack_free
from fedpfn.config import RunConfig
from fedpfn.records import to_array_record


def round_mask(model: nn.Module, cfg: RunConfig, seed: int) -> AnchorMask:
    """The mask every client and the server derive for one mask seed."""
    return draw_mask(
        model,
        cfg.anchor_ratio,
        seed,
        cfg.granularity,
        include_classifier=cfg.anchor_classifier,
        include_norm=cfg.anchor_norm,
    )


class AnchoredClient(FedAvgClient):
    """Anchors on top of whichever client rule follows in the MRO."""

    partial_upload = False

    def begin_round(self, model: nn.Module, content: RecordDict) -> None:
        super().begin_round(model, content)
        seed = int(content.config_records["config"]["anchor-seed"])
        self.mask = round_mask(model, self.cfg, seed)
        self.freeze = AnchorFreeze(model, self.mask)

    def after_step(self, model: nn.Module) -> None:
        super().after_step(model)
        self.freeze.restore()

    def upload(self, model: nn.Module, config: ConfigRecord) -> ArrayRecord:
        if not self.partial_upload:
            return super().upload(model, config)
        state = {name: t.detach().cpu().numpy() for name, t in model.state_dict().items()}
        return to_array_record(pack_free(state, self.mask))


class FedPFN(AnchoredClient):
    """Partially fixed neurons: weight-level anchors, full upload."""


class FedPNU(AnchoredClient):
    """Partial neuron update: neuron-level anchors, only trained neurons uploaded."""

    partial_upload = True


@lru_cache(maxsize=None)
def with_anchors(anchor_cls: type[AnchoredClient], rule_cls: type[FedAvgClient]) -> type[FedAvgClient]:
    """`anchor_cls` over `rule_cls`, e.g. FedPFN over FedProx, as one class."""
    if rule_cls is FedAvgClient:
        return anchor_cls
    return type(f"{anchor_cls.__name__}+{rule_cls.__name__}", (anchor_cls, rule_cls), {})
