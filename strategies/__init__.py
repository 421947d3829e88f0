"""The server side of every algorithm: any Flower strategy, with the algorithms' server parts
around it, server algorithms by name, and seeded client sampling."""

from __future__ import annotations

from strategies.anchored import AnchorServer
from strategies.composed import ComposedStrategy
from strategies.feddyn import FedDynServer
from strategies.fednova import FedNovaServer
from strategies.parts import ServerContext, ServerPart
from strategies.personal import PersonalServer
from strategies.registry import SERVER_RULES, build_inner_strategy, load_strategy_class, registration_of, server_rule
from strategies.sampling import SampledGrid, sample_clients
from strategies.scaffold import ScaffoldServer
from strategies.totals import ReplyTotals, RoundTotals

__all__ = [
    "SERVER_RULES",
    "AnchorServer",
    "ComposedStrategy",
    "FedDynServer",
    "FedNovaServer",
    "PersonalServer",
    "ReplyTotals",
    "RoundTotals",
    "SampledGrid",
    "ScaffoldServer",
    "ServerContext",
    "ServerPart",
    "build_inner_strategy",
    "load_strategy_class",
    "registration_of",
    "sample_clients",
    "server_rule",
]
