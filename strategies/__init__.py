"""The server side of every algorithm: any Flower strategy, with the algorithms' server parts
around it, server algorithms by name, and seeded client sampling.

A server part registers itself for its client rule (`@server_part("scaffold")`); every
module here is imported below, so adding one is adding its file.
"""

from __future__ import annotations

import importlib
import pkgutil

from strategies.composed import ComposedStrategy
from strategies.parts import SERVER_PARTS, ServerContext, ServerPart, server_part
from strategies.personal import PersonalServer
from strategies.registry import (
    SERVER_RULES,
    build_inner_strategy,
    load_strategy_class,
    registration_of,
    server_rule,
)
from strategies.sampling import SampledGrid, sample_clients
from strategies.totals import RoundTotals

for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")

__all__ = [
    "SERVER_PARTS",
    "SERVER_RULES",
    "ComposedStrategy",
    "PersonalServer",
    "RoundTotals",
    "SampledGrid",
    "ServerContext",
    "ServerPart",
    "build_inner_strategy",
    "load_strategy_class",
    "registration_of",
    "sample_clients",
    "server_part",
    "server_rule",
]
