"""The (ε, δ) a differentially private run has spent, from Opacus's RDP accountant.

Client-level DP (McMahan et al., "Learning Differentially Private Recurrent Language Models",
2018): one client's whole update is what the guarantee hides. Each round that releases an
aggregate is one Gaussian mechanism with the wrapper's noise multiplier z (noise std z·C on the
sum of updates clipped to norm C; Flower's wrappers add z·C/K to the mean of K), subsampled
with rate q = clients_per_round / num_clients. The accountant treats the sampling as Poisson
with that rate, as Opacus and TensorFlow Federated do for DP-FedAvg; fedpfn samples exactly K
clients without replacement, which this reads as its usual approximation. The arithmetic is
Opacus's (`opacus.accountants.RDPAccountant`), never written here; Opacus is the `privacy`
extra (pip install 'fedpfn[privacy]').
"""

from __future__ import annotations

import warnings
from typing import Any

from fedpfn.core.settings import ConfigError

ACCOUNTANT = "Opacus RDP accountant (client-level, Poisson-subsampled Gaussian)"


def rdp_accountant() -> Any:
    """A new `opacus.accountants.RDPAccountant`, or one line saying how to install Opacus."""
    try:
        from opacus.accountants import RDPAccountant
    except ImportError:
        raise ConfigError(
            "server_wrap: the privacy budget is computed by Opacus, which is not installed; "
            "pip install 'fedpfn[privacy]' (or opacus==1.6.0)"
        ) from None
    return RDPAccountant()


class PrivacyBudget:
    """The releases of a run so far and what they cost; a checkpoint keeps `releases`."""

    def __init__(self, noise_multiplier: float, sample_rate: float, delta: float) -> None:
        self.noise_multiplier = float(noise_multiplier)
        self.sample_rate = float(sample_rate)
        self.delta = float(delta)
        self.releases = 0
        rdp_accountant()  # refused at the start, not after the first round

    def release(self) -> None:
        """One more aggregate released (a round aggregated; a skipped round releases nothing)."""
        self.releases += 1

    def epsilon(self) -> float:
        """ε at `delta` after `releases` rounds (0 before any)."""
        if self.releases == 0:
            return 0.0
        accountant = rdp_accountant()
        for _ in range(self.releases):
            accountant.step(noise_multiplier=self.noise_multiplier, sample_rate=self.sample_rate)
        with warnings.catch_warnings():  # tiny noise: its best order lies below Opacus's; ε is then an upper bound
            warnings.filterwarnings("ignore", "Optimal order is the smallest alpha", UserWarning)
            return float(accountant.get_epsilon(self.delta))

    def figures(self) -> dict[str, Any]:
        """The round's row in metrics.jsonl: the budget spent so far."""
        return {"dp_epsilon": self.epsilon(), "dp_delta": self.delta, "dp_noise_multiplier": self.noise_multiplier}


def budget_for(kwargs: dict[str, Any], sample_rate: float, delta: float) -> PrivacyBudget | None:
    """The budget of a wrapper built with `kwargs`: where it adds noise (`noise_multiplier` > 0)."""
    noise = kwargs.get("noise_multiplier")
    if not isinstance(noise, (int, float)) or isinstance(noise, bool) or noise <= 0:
        return None
    return PrivacyBudget(noise, sample_rate, delta)
