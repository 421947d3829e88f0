"""FedPFN / FedPNU on the server: the round's mask seed, FedPNU's unpacking, anchored entries.

Every client held the anchored entries fixed, so the plain average there is the anchor
value up to rounding. What the new global model holds there:

- schedule `fixed` (one mask, anchors = the initial weights): the anchor values, always;
  TNA-PFN's definition. A server optimizer's step there is zero anyway (its pseudo-gradient
  is zero on entries that never moved), so nothing it counts is undone.
- schedule `round`, `anchor_server_step = keep` (default): the server algorithm's own step
  stands (FedAvgM's momentum from earlier rounds, FedDyn's correction); only the rounding
  of the weighted average is removed, as `inner − (plain mean − anchor)`. With plain
  FedAvg that is the anchor value, bit for bit.
- schedule `round`, `anchor_server_step = reset`: the anchor values, cancelling the server
  algorithm's step there (its moments still count it): kept to measure the difference.
- `anchor_masks = client` (the control): no entry is anchored by every client, so the
  aggregate is left as the inner strategy made it.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from flwr.app import RecordDict

from fedpfn.core.anchors import ANCHOR_SEED, anchored_fraction, as_numpy, round_mask
from fedpfn.core.arms import INDEPENDENT, masks_word
from fedpfn.core.protocol import ARRAYS, Arrays, to_array_record, to_numpy, unpack
from fedpfn.core.seeding import Stream, seed_for
from strategies.parts import Scalar, ServerContext, ServerPart, server_part
from strategies.totals import RoundTotals


@server_part("fedpfn", "fedpnu")
class AnchorServer(ServerPart):
    def __init__(self, ctx: ServerContext) -> None:
        super().__init__(ctx)
        self.partial_upload: bool = ctx.client.partial_upload  # type: ignore[attr-defined]
        self._masks: dict[int, Arrays] = {}
        self._fraction = float("nan")

    def seed_for(self, server_round: int) -> int:
        key = 0 if self.hyper.anchor_schedule == "fixed" else server_round
        return seed_for(self.ctx.cfg.seed, Stream.MASK, key)

    def mask_for(self, server_round: int) -> Arrays:
        if server_round not in self._masks:
            mask = round_mask(self.ctx.model, self.hyper, self.seed_for(server_round), self.ctx.personal)
            self._masks = {server_round: as_numpy(mask)}  # one round at a time
            self._fraction = anchored_fraction(mask)
        return self._masks[server_round]

    def config_entries(self, server_round: int) -> dict[str, Scalar]:
        return {ANCHOR_SEED: self.seed_for(server_round)}

    def restore(self, server_round: int, replies: list[RecordDict], sent: Arrays) -> None:
        """FedPNU's replies: the model from what was sent, update records with zeros."""
        if not self.partial_upload:
            return
        mask = self.mask_for(server_round)
        for content in replies:
            for key, record in list(content.array_records.items()):
                reference = sent if key == ARRAYS else None
                content[key] = to_array_record(unpack(to_numpy(record), mask, reference))

    def adjust(self, server_round: int, params: Arrays, sent: Arrays, totals: RoundTotals) -> Arrays:
        mask = self.mask_for(server_round)  # also the round's anchored fraction, for every mask kind
        if self.hyper.anchor_masks == masks_word(INDEPENDENT):
            return params
        reset = self.hyper.anchor_schedule == "fixed" or self.hyper.anchor_server_step == "reset"
        plain = {} if reset else totals.param_mean
        out = dict(params)
        for name, anchored in mask.items():
            if reset:
                anchor_value = sent[name]
            else:  # the inner strategy's step minus the rounding of plain averaging
                rounding = plain[name].astype(np.float64) - sent[name]
                anchor_value = (params[name].astype(np.float64) - rounding).astype(params[name].dtype)
            out[name] = np.where(anchored, anchor_value, params[name])
        return out

    def round_summary(self) -> dict[str, Any]:
        return {"anchored_fraction": self._fraction}
