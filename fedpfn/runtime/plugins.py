"""What plugs in around the algorithms (strategies.wrapping.PluginParams): a strategy wrapper
around the server side, a Flower mod around every client, and the refusals of either where the
run cannot use it, each in one line before anything starts."""

from __future__ import annotations

from collections.abc import Collection
from typing import TYPE_CHECKING

from fedpfn.core.config import RunConfig
from fedpfn.core.settings import ConfigError, is_set
from fedpfn.runtime.client_mods import Mod, load_client_mod
from strategies.composed import ComposedStrategy
from strategies.privacy import budget_for
from strategies.wrapping import (
    PLUGINS,
    ComposedView,
    PluginParams,
    WrappedStrategy,
    build_wrapper,
    plugins_of,
    wrapper_kwargs,
)

if TYPE_CHECKING:
    from clients.base import ClientRule


def wrapped(cfg: RunConfig, composed: ComposedStrategy) -> ComposedStrategy | WrappedStrategy:
    """`composed` inside the run's `server_wrap`, with its privacy budget where it adds noise."""
    params = plugins_of(cfg)
    if not params.server_wrap:
        return composed
    view = ComposedView(composed)
    wrapper = build_wrapper(params, view, cfg.federation.clients_per_round)
    kwargs = wrapper_kwargs(params, cfg.federation.clients_per_round)
    budget = budget_for(kwargs, cfg.federation.clients_per_round / cfg.federation.num_clients, params.dp_delta)
    return WrappedStrategy(view, wrapper, cfg.seed, budget, params.server_wrap, cfg.federation.round_timeout or None)


def plugin_problems(cfg: RunConfig, given: Collection[str] | None, rules: list[type[ClientRule]]) -> list[str]:
    """Why the run's wrapper or mod cannot run with its other settings (`rules`: its client side)."""
    params = plugins_of(cfg)
    defaults = PluginParams()
    out = empty_plugins(cfg, given or ())
    out += [
        f"{name}: {getattr(params, name)} is set, but only {needs} uses it"
        for name, needs, used in (
            ("server_wrap_args", "--server-wrap", params.server_wrap),
            ("dp_delta", "--server-wrap", params.server_wrap),
            ("client_mod_args", "--client-mod", params.client_mod),
        )
        if not used and is_set(name, getattr(params, name), getattr(defaults, name), given)
    ]
    if out:
        return out
    try:
        if params.server_wrap:
            build_wrapper(params, ComposedView.__new__(ComposedView), cfg.federation.clients_per_round)
            wrapped_budget(cfg, params)
        if params.client_mod:
            out += mod_problems(cfg, given, rules)
    except ConfigError as err:
        out.append(str(err))
    return out


def empty_plugins(cfg: RunConfig, given: Collection[str]) -> list[str]:
    """A wrapper or mod named as '': refused, where '' reads as not given (an empty shell variable
    would switch privacy off without a word). `given`: the settings the command names (under `flwr
    run`, its run config's overrides: pyproject's own '' is not given)."""
    params = plugins_of(cfg)
    return [
        f"{name}: '' names no {what}; give package.module:Name (docs/guide/privacy.md), or leave --{flag} out"
        for name, flag, what in (("server_wrap", "server-wrap", "wrapper"), ("client_mod", "client-mod", "mod"))
        if getattr(params, name) is None and {name, f"{PLUGINS}.{name}"} & set(given)
    ]


def wrapped_budget(cfg: RunConfig, params: PluginParams) -> None:
    """Opacus installed where the wrapper adds noise (refused before the first round, not after)."""
    budget_for(wrapper_kwargs(params, cfg.federation.clients_per_round), cfg.federation.clients_per_round / cfg.federation.num_clients, params.dp_delta)


def mod_problems(cfg: RunConfig, given: Collection[str] | None, rules: list[type[ClientRule]]) -> list[str]:
    """A mod runs around a ClientApp, and sees one model sent and the same entries back."""
    params = plugins_of(cfg)
    if given is not None and cfg.engine.name == "batched":
        return [
            f"client_mod: {params.client_mod} runs around Flower's ClientApp, which the batched engine does not "
            "call (it trains a round as one program); run it with --engine ray (or flwr run, or a deployment)"
        ]
    partial = [rule.name for rule in rules if getattr(rule, "partial_upload", False)]
    if partial or cfg.task.personal or any(rule.personal_layers for rule in rules):
        what = f"{partial[0]} uploads only the entries that trained" if partial else "clients keep entries of their own"
        return [
            f"client_mod: {what}, and a Flower mod compares the reply with the model sent, entry for entry; "
            "use it with a rule that uploads the whole model"
        ]
    load_client_mod(params.client_mod or "", params.client_mod_args)
    return []


def client_mod_of(cfg: RunConfig) -> Mod | None:
    """The run's mod, built once per process."""
    params = plugins_of(cfg)
    return load_client_mod(params.client_mod, params.client_mod_args) if params.client_mod else None


def wrapper_line(cfg: RunConfig) -> list[str]:
    """The header's line on a wrapper and its budget (none without one)."""
    params = plugins_of(cfg)
    lines = []
    if params.server_wrap:
        from strategies.privacy import ACCOUNTANT

        per_round, num_clients = cfg.federation.clients_per_round, cfg.federation.num_clients
        kwargs = wrapper_kwargs(params, per_round)
        shown = ", ".join(f"{k} {v}" for k, v in kwargs.items())
        recorded = budget_for(kwargs, per_round / num_clients, params.dp_delta) is not None  # as `wrapped` decides
        budget = f"; (ε, δ={params.dp_delta:g}) by {ACCOUNTANT}, q = {per_round}/{num_clients}" if recorded else ""
        lines.append(
            f"  wrapper    {params.server_wrap.rpartition(':')[2]}({shown}); it reads every reply (the batched "
            f"engine sends each client's model, not the round's totals){budget}"
        )
    if params.client_mod:
        lines.append(f"  client mod {params.client_mod.rpartition(':')[2]} around every ClientApp call")
    return lines
