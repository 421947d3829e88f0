"""The client side of every algorithm: FedAvg's rule, its small subclasses and the anchor
methods, one file each, and the simulated attacks, one file each in clients/attacks/. Each
registers itself (`@client_rule`, `@anchor_method`, `@attack`); every module here is imported
below, so adding a rule is adding its file.

`fedpfn.runtime.engines` composes the rules' hooks and trains a round's clients;
`fedpfn.runtime.algorithms` joins each rule to its server part.
"""

from __future__ import annotations

import importlib
import pkgutil

from clients.base import (
    ANCHOR_METHODS,
    CLIENT_RULES,
    ClientRule,
    FedAvgClient,
    Round,
    anchor_method,
    client_rule,
    load_client_rule,
)

for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")

__all__ = [
    "ANCHOR_METHODS",
    "CLIENT_RULES",
    "ClientRule",
    "FedAvgClient",
    "Round",
    "anchor_method",
    "client_rule",
    "load_client_rule",
]
