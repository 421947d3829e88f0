"""The server side of FedPFN / FedPNU, around any Flower strategy.

It sends the round's mask seed, rebuilds FedPNU's partial uploads from the global model,
and keeps the anchored coordinates of the new global model exactly at their anchor
values: every client held them fixed, so the averaged update there is zero, and writing
the anchors back removes the rounding of the weighted average (and of any server
optimizer) instead of letting it drift over hundreds of rounds.
"""

from __future__ import annotations

import numpy as np
from flwr.app import Array, ArrayRecord, Message
from flwr.serverapp.strategy import Strategy
from torch import nn

from clients.anchored import round_mask
from fedpfn.anchors import AnchorMask, mask_seed, unpack_free
from fedpfn.config import RunConfig
from fedpfn.records import to_array_record, to_numpy
from strategies.wrapper import StrategyWrapper


class AnchorAware(StrategyWrapper):
    def __init__(self, inner: Strategy, cfg: RunConfig, model: nn.Module) -> None:
        super().__init__(inner)
        self.cfg = cfg
        self.model = model  # architecture only: the mask depends on parameter names and shapes
        self.partial_upload = cfg.anchor_method == "fedpnu"

    def mask_for(self, server_round: int) -> AnchorMask:
        return round_mask(self.model, self.cfg, self.seed_for(server_round))

    def seed_for(self, server_round: int) -> int:
        return mask_seed(self.cfg.seed, server_round, self.cfg.anchor_schedule)

    def round_config(self, server_round: int) -> dict[str, int | float | str | bool]:
        self.mask = self.mask_for(server_round)
        return {"anchor-seed": self.seed_for(server_round)}

    def absorb_replies(self, server_round: int, replies: list[Message]) -> None:
        if not self.partial_upload:
            return
        reference = to_numpy(self.sent_arrays)
        for reply in replies:
            packed = to_numpy(reply.content.array_records["arrays"])
            reply.content["arrays"] = to_array_record(unpack_free(packed, reference, self.mask))

    def adjust_aggregate(self, server_round: int, arrays: ArrayRecord) -> ArrayRecord:
        sent = self.sent_arrays
        out = {}
        for name, array in arrays.items():
            if name not in self.mask:
                out[name] = array
                continue
            value = np.where(self.mask[name].numpy(), sent[name].numpy(), array.numpy())
            out[name] = Array(np.ascontiguousarray(value))
        return ArrayRecord(out)
