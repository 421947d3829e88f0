"""Flower client algorithms; each is a small subclass of `FedAvgClient`."""

from __future__ import annotations

from clients.anchored import FedPFN, FedPNU, with_anchors
from clients.base import FedAvgClient
from clients.feddyn import FedDynClient
from clients.fedprox import FedProxClient
from clients.scaffold import ScaffoldClient
from fedpfn.config import RunConfig

CLIENT_RULES: dict[str, type[FedAvgClient]] = {
    "fedavg": FedAvgClient,
    "fedprox": FedProxClient,
    "scaffold": ScaffoldClient,
    "feddyn": FedDynClient,
}
ANCHOR_METHODS = {"fedpfn": FedPFN, "fedpnu": FedPNU}


def client_class(cfg: RunConfig) -> type[FedAvgClient]:
    """The class that trains for `cfg.algorithm` (e.g. `fedpfn+fedprox`)."""
    rule = CLIENT_RULES[cfg.client_rule]
    if cfg.anchor_method is None:
        return rule
    return with_anchors(ANCHOR_METHODS[cfg.anchor_method], rule)


__all__ = ["CLIENT_RULES", "ANCHOR_METHODS", "FedAvgClient", "FedPFN", "FedPNU", "client_class"]
