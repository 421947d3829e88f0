"""The client side of every algorithm: FedAvg's rule and its small subclasses, the anchor
methods, and the program that trains a round's clients (one, or a stacked cohort).

`fedpfn.runtime.algorithms` registers the rules by name.
"""

from __future__ import annotations

from clients.anchored import FedPFNClient, FedPNUClient
from clients.base import ClientRule, FedAvgClient, RoundInfo
from clients.fedbn import FedBNClient
from clients.feddyn import FedDynClient
from clients.fednova import FedNovaClient
from clients.fedprox import FedProxClient
from clients.moon import MoonClient
from clients.program import ClientJob, Cohort, CohortResult, local_round
from clients.scaffold import ScaffoldClient

__all__ = [
    "ClientJob",
    "ClientRule",
    "Cohort",
    "CohortResult",
    "FedAvgClient",
    "FedBNClient",
    "FedDynClient",
    "FedNovaClient",
    "FedPFNClient",
    "FedPNUClient",
    "FedProxClient",
    "MoonClient",
    "RoundInfo",
    "ScaffoldClient",
    "local_round",
]
