"""Server algorithms by name, and a user's Strategy by dotted path."""

from __future__ import annotations

import importlib
import inspect
from typing import Any

from flwr.serverapp.strategy import (
    FedAdagrad,
    FedAdam,
    FedAvg,
    FedAvgM,
    FedYogi,
    Strategy,
)

from fedpfn.config import ConfigError, RunConfig

# Sampling happens before the strategy sees the grid (see strategies.sampling), so the
# inner strategy takes every node it is shown and never runs federated evaluation.
_TAKE_ALL = dict(
    fraction_train=1.0,
    fraction_evaluate=0.0,
    min_train_nodes=1,
    min_evaluate_nodes=0,
    min_available_nodes=1,
)


def _named_strategy(cfg: RunConfig) -> Strategy:
    lr = {} if cfg.server_lr is None else {"server_learning_rate": cfg.server_lr}
    eta = {} if cfg.server_lr is None else {"eta": cfg.server_lr}
    if cfg.server == "fedavg":
        return FedAvg(**_TAKE_ALL)
    if cfg.server == "fedavgm":
        return FedAvgM(server_momentum=cfg.server_momentum, **lr, **_TAKE_ALL)
    if cfg.server == "fedadam":
        return FedAdam(beta_1=cfg.server_momentum, **eta, **_TAKE_ALL)
    if cfg.server == "fedyogi":
        return FedYogi(beta_1=cfg.server_momentum, **eta, **_TAKE_ALL)
    return FedAdagrad(**eta, **_TAKE_ALL)


def load_strategy_class(path: str) -> type[Strategy]:
    """`package.module:Class` -> the class, with a clear error for each way it can fail."""
    module_name, _, class_name = path.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as err:
        raise ConfigError(f"server: cannot import module '{module_name}' ({err})") from None
    cls = getattr(module, class_name, None)
    if not (inspect.isclass(cls) and issubclass(cls, Strategy)):
        raise ConfigError(
            f"server: '{path}' is not a flwr.serverapp.strategy.Strategy subclass"
        )
    return cls


def _user_strategy(path: str) -> Strategy:
    cls = load_strategy_class(path)
    accepted = inspect.signature(cls.__init__).parameters
    kwargs: dict[str, Any] = {k: v for k, v in _TAKE_ALL.items() if k in accepted}
    strategy = cls(**kwargs)
    for key, value in _TAKE_ALL.items():  # a class that takes no such arguments
        if hasattr(strategy, key):
            setattr(strategy, key, value)
    return strategy


def build_inner_strategy(cfg: RunConfig) -> Strategy:
    """The server algorithm alone, as Flower (or the user) defines it."""
    return _user_strategy(cfg.server) if ":" in cfg.server else _named_strategy(cfg)
