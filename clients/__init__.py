"""Flower client parts: FedAvg's rule and its small subclasses, and the anchor methods.

`fedpfn.runtime.algorithms` registers them by name; `clients.base.local_round` runs one round.
"""

from __future__ import annotations

from clients.anchored import FedPFN, FedPNU
from clients.base import ClientPart, FedAvgClient, RoundContext, local_round
from clients.feddyn import FedDynClient
from clients.fedprox import FedProxClient
from clients.scaffold import ScaffoldClient

__all__ = [
    "ClientPart",
    "FedAvgClient",
    "FedDynClient",
    "FedPFN",
    "FedPNU",
    "FedProxClient",
    "RoundContext",
    "ScaffoldClient",
    "local_round",
]
