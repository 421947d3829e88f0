"""Every algorithm by name, and the one rule by which client and server parts compose.

The composition rule, the same on both sides:

- A client is its client rule (FedAvg's local SGD, or a small subclass: FedProx, SCAFFOLD,
  FedDyn, MOON) followed, optionally, by an anchor method (FedPFN, FedPNU). Hooks run in
  that order: the rule's first, the anchors' last, so the anchor restore is the last thing
  after every optimizer step, and the anchors pack (FedPNU) the reply the rule built.
- The server is an inner strategy (Flower's FedAvg, FedAvgM, FedAdam, ... or a user's)
  with the server parts of the same algorithms around it, in the same order: parts add to
  what is sent in order, read the replies in reverse order (the anchors unpack before the
  rule's part reads), and adjust the aggregate in order (the rule's correction first, the
  anchors last). The inner strategy sees trainable parameters only (strategies.composed).
- Client parts (clients/) and server parts (strategies/) never import each other; they
  meet in Flower messages (fedpfn.core.protocol). This module is the one place that sees both:
  an algorithm is its client file (hooks, name, hyperparameters), optionally its server
  file, and one `Algorithm(...)` line below.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
from flwr.app import RecordDict
from flwr.serverapp.strategy import Strategy
from torch import nn

from clients import ClientPart, FedAvgClient, FedDynClient, FedPFN, FedPNU, FedProxClient, ScaffoldClient
from clients.base import local_round
from clients.moon import MoonClient
from fedpfn.core.settings import ConfigError, problems as setting_problems
from strategies import (
    SERVER_RULES,
    AnchorServer,
    ComposedStrategy,
    FedDynServer,
    ScaffoldServer,
    ServerContext,
    ServerPart,
    build_inner_strategy,
    server_rule,
)

if TYPE_CHECKING:
    from pathlib import Path

    from fedpfn.core.cache import ClientData
    from fedpfn.core.config import RunConfig


@dataclass(frozen=True)
class Algorithm:
    """A client part and, if it keeps server state, its server part."""

    client: type[ClientPart]
    server: type[ServerPart] | None = None

    @property
    def name(self) -> str:
        return self.client.name


def _by_name(*algorithms: Algorithm) -> dict[str, Algorithm]:
    return {a.name: a for a in algorithms}


CLIENT_RULES = _by_name(
    Algorithm(FedAvgClient),
    Algorithm(FedProxClient),
    Algorithm(ScaffoldClient, ScaffoldServer),
    Algorithm(FedDynClient, FedDynServer),
    Algorithm(MoonClient),
)
ANCHOR_METHODS = _by_name(Algorithm(FedPFN, AnchorServer), Algorithm(FedPNU, AnchorServer))


# --- names -----------------------------------------------------------------------------------


def split_algorithm(algorithm: str) -> tuple[str | None, str]:
    """`fedpfn+fedprox` -> ('fedpfn', 'fedprox'); `fedpnu` -> ('fedpnu', 'fedavg'); `scaffold` -> (None, 'scaffold')."""
    head, _, rest = algorithm.partition("+")
    if head in ANCHOR_METHODS:
        return head, rest or "fedavg"
    return None, algorithm


def algorithm_names() -> list[str]:
    return [*CLIENT_RULES, *ANCHOR_METHODS]


def _parts(algorithm: str) -> list[Algorithm]:
    anchor, rule = split_algorithm(algorithm)
    return [CLIENT_RULES[rule]] + ([ANCHOR_METHODS[anchor]] if anchor else [])


# --- hyperparameters ----------------------------------------------------------------------


def declared_by(algorithm: str, server: str) -> list[type]:
    """The hyperparameter classes an (algorithm, server) pair uses."""
    return [part.client.Params for part in _parts(algorithm)] + [server_rule(server).Params]


def hparam_classes() -> list[type]:
    """Every hyperparameter class: of each client rule, anchor method and server rule."""
    from strategies.registry import USER_RULE

    classes = [a.client.Params for a in (*CLIENT_RULES.values(), *ANCHOR_METHODS.values())]
    classes += [rule.Params for rule in (*SERVER_RULES.values(), USER_RULE)]
    return list(dict.fromkeys(classes))


def hparam_fields() -> dict[str, dataclasses.Field]:
    """Every declared hyperparameter by name; two algorithms may not declare one name twice."""
    fields: dict[str, dataclasses.Field] = {}
    owner: dict[str, type] = {}
    for cls in hparam_classes():
        for f in dataclasses.fields(cls):
            if f.name in fields:
                raise TypeError(f"hyperparameter '{f.name}' is declared by {owner[f.name].__name__} and {cls.__name__}")
            fields[f.name], owner[f.name] = f, cls
    return fields


def resolve_hparams(cfg: RunConfig) -> dict[str, Any]:
    """The used hyperparameters with defaults filled in, the anchor granularity resolved."""
    values: dict[str, Any] = {}
    for cls in declared_by(cfg.algorithm, cfg.server):
        values.update(dataclasses.asdict(cfg.params(cls)))
    anchor, _ = split_algorithm(cfg.algorithm)
    if anchor is not None and values.get("anchor_granularity") is None:
        values["anchor_granularity"] = ANCHOR_METHODS[anchor].client.default_granularity  # type: ignore[attr-defined]
    return values


# --- checks ----------------------------------------------------------------------------------


def problems(cfg: RunConfig) -> list[str]:
    """What the algorithms say about a config: names, optimizer, their hyperparameters."""
    anchor, rule = split_algorithm(cfg.algorithm)
    if rule not in CLIENT_RULES or "+" in rule:
        return [
            f"algorithm: unknown '{cfg.algorithm}'; use one of {', '.join(algorithm_names())}, "
            "or METHOD+RULE with METHOD in fedpfn, fedpnu (e.g. fedpfn+fedprox)"
        ]
    out = []
    try:
        used = declared_by(cfg.algorithm, cfg.server)
    except ConfigError as err:
        return [str(err)]
    client = CLIENT_RULES[rule].client
    if cfg.optimizer not in client.optimizers:
        out.append(
            f"optimizer: {rule} is defined for {', '.join(client.optimizers)} only, not '{cfg.optimizer}' "
            "(its control variates assume SGD steps)"
        )
    for cls in used:
        out += setting_problems(cfg.params(cls))
    used_names = {f.name for cls in used for f in dataclasses.fields(cls)}
    fields = hparam_fields()
    for name, value in cfg.hparams.items():
        if name not in used_names and value != fields[name].default:
            out.append(f"{name}: {value} is set, but {cfg.algorithm} with server {cfg.server} does not use it")
    if not out and ":" in cfg.server:
        out += _user_strategy_problems(cfg)
    return out


def _user_strategy_problems(cfg: RunConfig) -> list[str]:
    try:
        build_inner(cfg)
    except ConfigError as err:
        return [str(err)]
    return []


# --- building the two sides -------------------------------------------------------------------


def client_parts(cfg: RunConfig) -> list[type[ClientPart]]:
    return [part.client for part in _parts(cfg.algorithm)]


def run_client(
    cfg: RunConfig,
    partition_id: int,
    state: RecordDict,
    device: torch.device,
    content: RecordDict,
    *,
    data: ClientData | None = None,
    state_root: Path | None = None,
) -> RecordDict:
    """One client's round for `cfg.algorithm`: the reply's content (`data`, `state_root`: see local_round)."""
    return local_round(client_parts(cfg), cfg, partition_id, state, device, content, data=data, state_root=state_root)


def build_inner(cfg: RunConfig) -> Strategy:
    return build_inner_strategy(cfg.server, cfg.params(server_rule(cfg.server).Params))


def build_strategy(cfg: RunConfig, model: nn.Module) -> ComposedStrategy:
    """The server algorithm with the server parts of the client rule and the anchors."""
    parts = [
        part.server(ServerContext(cfg=cfg, model=model, params=cfg.params(part.client.Params)))
        for part in _parts(cfg.algorithm)
        if part.server is not None
    ]
    names = [name for name, _ in model.named_parameters()]
    return ComposedStrategy(build_inner(cfg), parts, names)


def state_keys(cfg: RunConfig) -> tuple[str, ...]:
    """The records the algorithm's clients keep across rounds (checked on resume)."""
    return tuple(key for cls in client_parts(cfg) for key in cls.state_keys)
