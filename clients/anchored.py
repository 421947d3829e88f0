"""FedPFN and FedPNU on the client: the rule underneath trains with fixed neuron anchors.

Either method sits after any client rule (FedAvg, FedProx, SCAFFOLD, FedDyn, MOON, FedNova):
it rebuilds the round's mask from the seed the server sends (ANCHOR_SEED), takes the
received global weights as anchor values, marks them frozen for the rule, and puts them
back after every optimizer step. FedPNU (partial neuron update) also leaves the anchored
entries out of every array of its reply (`partial_upload`), since the server knows them
already; strategies/anchored.py reads this module's declarations to send the seed and to
unpack the replies (pack and unpack live in fedpfn.core.protocol: per-client parameters leave
entries out of replies the same way).

`anchor_masks = client` is the study's control: each client draws a mask of its own (from
the round's seed and its partition id), so the same fraction of weights is frozen during
local training but no entry is shared between clients. It tells "shared anchors align
clients" apart from "freezing some weights regularises".
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import ClassVar

from torch import nn

from clients.base import Arrays, ClientRound, ClientRule, RoundInfo, prefixed, unprefixed
from fedpfn.core.anchors import GRANULARITIES, AnchorMask, as_numpy, draw_mask
from fedpfn.core.protocol import CONFIG
from fedpfn.core.seeding import Stream, seed_for
from fedpfn.core.settings import between, one_of, setting
from fedpfn.core.training import Tensors, freeze

ANCHOR_SEED = "anchor-seed"  # CONFIG entry, server -> client: the seed of the round's mask
SCHEDULES = ("round", "fixed")
SERVER_STEPS = ("keep", "reset")
MASKS = ("shared", "client")


@dataclass(frozen=True)
class AnchorParams:
    """The settings of FedPFN and FedPNU, shared by their client and server sides."""

    anchor_ratio: float = setting(0.4, "fraction of entries fixed as anchors", between(0, 1, high_open=True))
    anchor_granularity: str | None = setting(
        None, "weight or neuron (default: weight for fedpfn, neuron for fedpnu)", one_of(GRANULARITIES)
    )
    anchor_schedule: str = setting(
        "round", "round: a new mask every round; fixed: one mask, the initial weights, all run", one_of(SCHEDULES)
    )
    anchor_classifier: bool = setting(True, "anchor the classifier layer too")
    anchor_norm: bool = setting(True, "anchor norm-layer scales and shifts too")
    anchor_server_step: str = setting(
        "keep",
        "round schedule under a server optimizer: keep its own step on anchored entries, "
        "or reset them to their anchor values",
        one_of(SERVER_STEPS),
    )
    anchor_masks: str = setting(
        "shared",
        "shared: every client of a round anchors the same entries (TNA-PFN); client: each its own "
        "(the control: as much freezing, nothing shared; fedpfn only)",
        one_of(MASKS),
    )


def round_mask(model: nn.Module, params: AnchorParams, seed: int, personal: Collection[str] = ()) -> AnchorMask:
    """The anchors of one mask seed: the same on every client and on the server (never a personal entry)."""
    if params.anchor_granularity is None:
        raise ValueError("anchor_granularity is unresolved; build the config with load_config")
    return draw_mask(
        model,
        params.anchor_ratio,
        seed,
        params.anchor_granularity,
        include_classifier=params.anchor_classifier,
        include_norm=params.anchor_norm,
        exclude=personal,
    )


class FedPFNClient(ClientRule):
    """Partially fixed neurons: weight-level anchors by default, full upload."""

    name = "fedpfn"
    Params = AnchorParams
    default_granularity: ClassVar[str] = "weight"
    partial_upload: ClassVar[bool] = False  # replies leave the anchored entries out
    personal_start = True  # it freezes anchors at the global values, and no personal entry is one

    def __init__(self, info: RoundInfo) -> None:
        super().__init__(info)
        self.seed = int(info.content.config_records[CONFIG][ANCHOR_SEED])
        self.shared = self.params.anchor_masks == "shared"
        if self.shared:
            self.mask = round_mask(info.model, self.params, self.seed, info.personal)
            self.on_device = {name: m.to(info.start[name].device) for name, m in self.mask.items()}

    def inputs(self, client: ClientRound) -> Tensors:
        if self.shared:
            return {}
        seed = seed_for(self.info.cfg.seed, Stream.CLIENT_MASK, self.seed, client.partition_id)
        mask = round_mask(self.info.model, self.params, seed, self.info.personal)
        return prefixed("mask", {name: m.to(self.info.start[name].device) for name, m in mask.items()})

    def frozen(self, own: Tensors) -> Tensors:
        return self.on_device if self.shared else unprefixed("mask", own)

    def after_step(self, params: Tensors, own: Tensors) -> Tensors:
        return freeze(params, self.info.start, self.frozen(own))

    def upload_mask(self) -> Arrays | None:
        return as_numpy(self.mask) if self.partial_upload else None


class FedPNUClient(FedPFNClient):
    """Partial neuron update: neuron-level anchors by default, only trained entries uploaded."""

    name = "fedpnu"
    default_granularity = "neuron"
    partial_upload = True

    @classmethod
    def problems(cls, params: AnchorParams) -> list[str]:
        if params.anchor_masks == "client":
            return ["anchor_masks: 'client' is for fedpfn: FedPNU's replies leave out entries the server must know"]
        return []
