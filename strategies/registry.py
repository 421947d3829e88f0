"""Server algorithms by name, with their hyperparameters and what they keep, and a user's
Strategy by dotted path.

A registration declares everything the project needs to know of a server algorithm: its
hyperparameters (`Params`), how to build it, the attributes that carry its state from round
to round (saved with every checkpoint: a stateful strategy registered without them would
silently lose its state on resume), and whether it aggregates by the example-weighted mean
alone (then the batched engine may hand it the round's mean instead of K replies).
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from flwr.serverapp.strategy import FedAdagrad, FedAdam, FedAvg, FedAvgM, FedYogi, Strategy

from fedpfn.core.flower_notes import NO_FEDERATED_EVALUATION, flower_note_dropped
from fedpfn.core.kwargs import check_kinds, parse_kwargs
from fedpfn.core.settings import ConfigError, above, between, setting
from fedpfn.core.user_code import USER_FAULTS, import_user_class, user_fault

# Sampling happens before the strategy sees the grid (strategies.sampling), so the inner
# strategy takes every node it is shown and never runs federated evaluation.
TAKE_ALL: dict[str, Any] = dict(
    fraction_train=1.0,
    fraction_evaluate=0.0,
    min_train_nodes=1,
    min_evaluate_nodes=0,
    min_available_nodes=1,
)


@dataclass(frozen=True)
class NoServerParams:
    """Plain FedAvg: nothing to set."""


@dataclass(frozen=True)
class ServerOptParams:
    """Server optimizers on the averaged update (FedAvgM, FedAdam, FedYogi, FedAdagrad)."""

    server_lr: float | None = setting(
        None, "server learning rate of fedavgm/fedadam/fedyogi/fedadagrad (default: Flower's)", above(0)
    )
    server_momentum: float = setting(
        0.9, "server momentum (fedavgm) or beta_1 (fedadam, fedyogi)", between(0, 1, high_open=True)
    )


@dataclass(frozen=True)
class UserStrategyParams:
    """A user's `--server module:Class`: its keyword arguments, `--server-args`."""

    server_args: str | None = setting(
        None, "keyword arguments of --server module:Class as a JSON object, e.g. '{\"beta\": 0.2}'"
    )


USER_STRATEGY = "strategy"  # the namespace of a user's strategy's hyperparameters


@dataclass(frozen=True)
class ServerRule:
    """A server algorithm's registration (`--server NAME`); every user's `module:Class` shares one.

    Attributes:
        name: what runs call it (`module:Class` for a user's).
        Params: a frozen dataclass of its hyperparameters, each field a `setting(...)`.
        strategy: the Flower strategy class it builds (None: a user's `module:Class`).
        arguments: its keyword arguments from an instance of `Params`.
        state: attributes carrying state between rounds, saved with every checkpoint
            (`current_arrays` is set each round).
        mean_based: its aggregate is a function of the replies' example-weighted mean alone.
    """

    name: str
    Params: type
    strategy: type[Strategy] | None
    arguments: Callable[[Any], dict[str, Any]] = lambda params: {}
    state: tuple[str, ...] = ()
    mean_based: bool = False

    @property
    def namespace(self) -> str:
        """Where a run keeps its hyperparameters: `fedavgm.server_lr`, `strategy.server_args` for a
        user's `module:Class` (fedpfn.core.hyper)."""
        return USER_STRATEGY if ":" in self.name else self.name

    def build(self, params: Any) -> Strategy:
        """The strategy with `params`, taking every client it is shown (sampling happens before it)."""
        assert self.strategy is not None, "a user's strategy is built by build_user_strategy"
        with flower_note_dropped(NO_FEDERATED_EVALUATION):  # TAKE_ALL's choice, not the user's
            return self.strategy(**self.arguments(params), **TAKE_ALL)


def _lr(key: str, params: ServerOptParams) -> dict[str, float]:
    return {} if params.server_lr is None else {key: params.server_lr}


def _adaptive(params: ServerOptParams) -> dict[str, float]:
    """FedAdam's and FedYogi's arguments: momentum is their beta_1, the learning rate their eta."""
    return {"beta_1": params.server_momentum, **_lr("eta", params)}


def _registry(*rules: ServerRule) -> dict[str, ServerRule]:
    return {rule.name: rule for rule in rules}


FEDOPT_STATE = ("m_t", "v_t")
SERVER_RULES = _registry(
    ServerRule("fedavg", NoServerParams, FedAvg, mean_based=True),
    ServerRule(
        "fedavgm",
        ServerOptParams,
        FedAvgM,
        lambda p: {"server_momentum": p.server_momentum, **_lr("server_learning_rate", p)},
        state=("momentum_vector",),
        mean_based=True,
    ),
    ServerRule("fedadam", ServerOptParams, FedAdam, _adaptive, state=FEDOPT_STATE, mean_based=True),
    ServerRule("fedyogi", ServerOptParams, FedYogi, _adaptive, state=FEDOPT_STATE, mean_based=True),
    ServerRule("fedadagrad", ServerOptParams, FedAdagrad, lambda p: _lr("eta", p), state=FEDOPT_STATE, mean_based=True),
)
USER_RULE = ServerRule("module:Class", UserStrategyParams, None)


def registration_of(strategy: Strategy) -> ServerRule | None:
    """The registration of the class `strategy` is, however it was named (`fedavgm` or its dotted path)."""
    return next((rule for rule in SERVER_RULES.values() if type(strategy) is rule.strategy), None)


def server_rule(server: str) -> ServerRule:
    """The declaration of `server`: a name above, or a user's `module:Class`."""
    if ":" in server:
        return USER_RULE
    if server not in SERVER_RULES:
        raise ConfigError(
            f"server: unknown '{server}'; use one of {', '.join(SERVER_RULES)} or package.module:StrategyClass"
        )
    return SERVER_RULES[server]


def load_strategy_class(path: str) -> type[Strategy]:
    """`package.module:Class` -> the strategy class (fedpfn.core.user_code: never from a run folder)."""
    return import_user_class(path, "server", Strategy, "a flwr.serverapp.strategy.Strategy subclass", "strategy")


def accepted_keywords(cls: type) -> tuple[list[str], bool]:
    """The keywords `cls(...)` takes: its own and, through `**kwargs`, its bases' (FedAvg's).

    The flag says any name goes: `**kwargs` all the way up, with no base that names them.
    """
    names: list[str] = []
    named = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    for klass in cls.__mro__:
        if "__init__" not in vars(klass):
            continue
        params = inspect.signature(klass.__init__).parameters
        names += [n for n, p in params.items() if n != "self" and p.kind in named and n not in names]
        if not any(p.kind is p.VAR_KEYWORD for p in params.values()):
            return names, False
    return names, True


def build_user_strategy(path: str, args: str | None, per_round: int | None = None) -> Strategy:
    """Construct the user's class with `args`; a wrong keyword is named with the accepted ones.

    With `per_round` (the replies a round aggregates), a robust aggregator that would have too
    few of them to mean anything (Krum's n >= 2f + 3) is warned about on the `fedpfn` logger.
    """
    cls = load_strategy_class(path)
    kwargs = parse_kwargs(args, "server_args")
    accepted, takes_any = accepted_keywords(cls)
    unknown = sorted(set(kwargs) - set(accepted)) if not takes_any else []
    if unknown:
        raise ConfigError(f"server_args: {path} takes no argument {', '.join(unknown)}; it accepts {', '.join(accepted)}")
    check_kinds(cls, kwargs, "server_args")
    sampling = sorted(set(kwargs) & set(TAKE_ALL))
    if sampling:  # they would be overwritten below: refused, not ignored
        raise ConfigError(
            f"server_args: {', '.join(sampling)} is fedpfn's to set (clients_per_round samples the round's "
            "clients; the server evaluates the global model itself); leave it out"
        )
    kwargs = {**{k: v for k, v in TAKE_ALL.items() if k in accepted}, **kwargs}
    try:
        with flower_note_dropped(NO_FEDERATED_EVALUATION):  # TAKE_ALL's choice, not the user's
            strategy = cls(**kwargs)
    except USER_FAULTS as err:  # the user's constructor may raise anything, SystemExit too
        line = f"server: {path}({', '.join(kwargs)}) failed: {type(err).__name__}: {err}"
        raise user_fault(err, line) from None
    for key, value in TAKE_ALL.items():  # a class that takes no such arguments
        if hasattr(strategy, key):
            setattr(strategy, key, value)
    malicious = getattr(strategy, "num_malicious_nodes", 0)
    if per_round is not None and malicious and per_round < 2 * malicious + 3:
        logging.getLogger("fedpfn").warning(
            "server: %s with num_malicious_nodes=%d needs at least %d replies a round (n >= 2f + 3) to tell "
            "a bad update from a good one; with %d clients a round its choice means nothing",
            path, malicious, 2 * malicious + 3, per_round,
        )  # fmt: skip
    return strategy


def build_inner_strategy(server: str, params: Any) -> Strategy:
    """The server algorithm alone, as Flower (or the user) defines it."""
    if ":" in server:
        return build_user_strategy(server, params.server_args)
    return SERVER_RULES[server].build(params)
