"""Server strategies: any Flower strategy, wrapped by client-rule state and by anchors."""

from __future__ import annotations

from flwr.serverapp.strategy import Strategy
from torch import nn

from fedpfn.config import RunConfig
from strategies.anchored import AnchorAware
from strategies.feddyn import FedDynServer
from strategies.registry import build_inner_strategy, load_strategy_class
from strategies.sampling import SampledGrid, sample_clients
from strategies.scaffold import ScaffoldServer
from strategies.wrapper import StrategyWrapper

# client rule -> the wrapper that keeps its server state (SCAFFOLD's c, FedDyn's h)
SERVER_STATE: dict[str, type[StrategyWrapper]] = {"scaffold": ScaffoldServer, "feddyn": FedDynServer}


def build_strategy(cfg: RunConfig, model: nn.Module) -> Strategy:
    """The server algorithm, wrapped by the client rule's server state and by the anchors."""
    strategy: StrategyWrapper = StrategyWrapper(build_inner_strategy(cfg))
    state_cls = SERVER_STATE.get(cfg.client_rule)
    if state_cls is not None:
        strategy = state_cls(strategy, cfg)
    if cfg.anchor_method is not None:
        strategy = AnchorAware(strategy, cfg, model)
    return strategy


__all__ = [
    "AnchorAware",
    "SampledGrid",
    "StrategyWrapper",
    "build_inner_strategy",
    "build_strategy",
    "load_strategy_class",
    "sample_clients",
]
