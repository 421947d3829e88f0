"""FedNova's server side (Wang et al., NeurIPS 2020): the normalised step rescaled by τ_eff.

The replies carry normalised models x − d_i and their a_i (clients/fednova.py), so the
inner strategy's example-weighted mean is x − Σ p_i d_i; this part sets

    x⁺ = x + τ_eff · (mean − x)        τ_eff = Σ p_i a_i (the example-weighted mean of a_i)

on the parameters (buffers are averaged as sent). Under a server optimizer its step on the
normalised pseudo-gradient is rescaled the same way. With FedPFN's `round` schedule and
`anchor_server_step = keep`, an anchored entry comes out at the anchor plus (τ_eff − 1)
times the rounding of the weighted mean (a few ulp), not the anchor bit for bit.
"""

from __future__ import annotations

import numpy as np

from clients.fednova import NORMALISER
from fedpfn.core.protocol import Arrays
from strategies.parts import ServerPart, server_part
from strategies.totals import RoundTotals


@server_part("fednova")
class FedNovaServer(ServerPart):
    def adjust(self, server_round: int, params: Arrays, sent: Arrays, totals: RoundTotals) -> Arrays:
        tau_eff = totals.metric_mean(NORMALISER)
        return {
            name: (sent[name] + tau_eff * (value.astype(np.float64) - sent[name])).astype(value.dtype)
            for name, value in params.items()
        }
