"""Server strategies: any Flower strategy, with the algorithms' server parts around it."""

from __future__ import annotations

from strategies.anchored import AnchorServer
from strategies.composed import ComposedStrategy
from strategies.feddyn import FedDynServer
from strategies.parts import ServerContext, ServerPart
from strategies.registry import SERVER_RULES, build_inner_strategy, load_strategy_class, server_rule
from strategies.sampling import SampledGrid, sample_clients
from strategies.scaffold import ScaffoldServer

__all__ = [
    "SERVER_RULES",
    "AnchorServer",
    "ComposedStrategy",
    "FedDynServer",
    "SampledGrid",
    "ScaffoldServer",
    "ServerContext",
    "ServerPart",
    "build_inner_strategy",
    "load_strategy_class",
    "sample_clients",
    "server_rule",
]
