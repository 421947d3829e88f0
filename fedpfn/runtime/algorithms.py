"""Every algorithm by name, the one rule by which client and server parts compose, and the
run config with the algorithms' hyperparameters joined to it.

The composition rule, the same on both sides:

- A client is its client rule (FedAvg's local SGD, or a small subclass: FedProx, SCAFFOLD,
  FedDyn, MOON, FedNova) followed, optionally, by an anchor method (FedPFN, FedPNU). Hooks
  run in that order: the rule's first, the anchors' last, so the anchor freeze is the last
  thing after every optimizer step, and the anchors pack (FedPNU) the reply the rule built.
- The server is an inner strategy (Flower's FedAvg, FedAvgM, FedAdam, ... or a user's)
  with the server parts of the same algorithms around it, in the same order: parts add to
  what is sent in order, restore and absorb the replies in reverse order (the anchors
  unpack before the rule's part reads), and adjust the aggregate in order (the rule's
  correction first, the anchors last). The inner strategy sees trainable parameters only
  (strategies.composed).
- A client rule is a file in clients/ (its name, Params, message keys and hooks); its
  server part, if it has one, a file in strategies/ that reads those declarations; each
  registers itself (`@client_rule`, `@server_part`). Server algorithms register in
  strategies/registry.py.

The core settings (fedpfn.core.config) know no algorithm: a config is built here, where
the algorithms' declared hyperparameters join them (`load_config`), each namespaced by the
part that declares it (`fedprox.prox_mu`, `fedpfn.anchor_ratio`, `fedavgm.server_lr`,
`plugins.server_wrap`, `attacks.attack`: fedpfn.core.hyper), so a user's rule may declare
any name but a core setting's.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from dataclasses import dataclass
from typing import Any

from flwr.serverapp.strategy import Strategy
from torch import nn

from clients import ANCHOR_METHODS, CLIENT_RULES, ClientRule, load_client_rule
from clients.attacks import Attack, AttackParams, attack_class, attack_of, attack_problems, attack_values
from fedpfn.core.anchors import AnchorParams, anchor_values
from fedpfn.core.config import RunConfig, core_fields
from fedpfn.core.groups import Start
from fedpfn.core.hyper import NAMESPACE, SEP, dotted, key, split_key
from fedpfn.core.init_file import file_sha256
from fedpfn.core.personal import PERSONAL, meta_model, personal_entries
from fedpfn.core.settings import ConfigError, is_set, one_per_setting
from fedpfn.core.settings import problems as setting_problems
from fedpfn.core.user_code import code_settings, name_code
from fedpfn.runtime.plugins import plugin_problems, wrapped
from strategies import (
    SERVER_PARTS,
    SERVER_RULES,
    ComposedStrategy,
    PersonalServer,
    ServerContext,
    ServerPart,
    build_inner_strategy,
    registration_of,
    server_rule,
)
from strategies.registry import USER_RULE
from strategies.wrapping import PLUGINS, PluginParams, WrappedStrategy, plugin_values, plugins_of

Part = tuple[str, type]  # (namespace, hyperparameter class) of one part of a run
PLUG_INS: list[Part] = [(PLUGINS, PluginParams), (Attack.namespace(), AttackParams)]  # any run may use


@dataclass(frozen=True)
class Algorithm:
    """A client rule and, if it keeps server state or changes the aggregate, its server part."""

    client: type[ClientRule]
    server: type[ServerPart] | None = None

    @property
    def name(self) -> str:
        return self.client.name


def algorithm_of(rule: type[ClientRule]) -> Algorithm:
    """A registered client rule with the server part registered for its name, if any."""
    return Algorithm(rule, SERVER_PARTS.get(rule.name))


# --- names -----------------------------------------------------------------------------------


def split_algorithm(algorithm: str) -> tuple[str | None, str]:
    """`fedpfn+fedprox` -> ('fedpfn', 'fedprox'); `fedpnu` -> ('fedpnu', 'fedavg'); `scaffold` -> (None, 'scaffold').

    A rule named by dotted path (`fedpfn+mypkg.rules:MyRule`) is imported and registered here."""
    head, _, rest = algorithm.partition("+")
    anchor, rule = (head, rest or "fedavg") if head in ANCHOR_METHODS else (None, algorithm)
    if ":" in rule and rule not in CLIENT_RULES:
        cls = load_client_rule(rule)  # ConfigError where it does not load
        check_own_settings(rule, cls)
        CLIENT_RULES[rule] = cls
    return anchor, rule


def check_own_settings(spec: str, rule: type[ClientRule]) -> None:
    """A user's rule has a name of its own, its settings' namespace (any other algorithm's names are
    its to declare too: fedpfn.core.hyper), and declares no core setting: one line naming both."""
    core, space = core_fields(), rule.namespace()
    if not NAMESPACE.fullmatch(space) or space in core:
        why = "is a core setting" if space in core else "is not letters, digits, '_' and '-'"
        raise ConfigError(f"algorithm: '{spec}' is named '{rule.name}', which {why}; its settings are saved "
                          f"as {space}.NAME: give it another name")  # fmt: skip
    if space in hparam_parts():
        raise ConfigError(
            f"algorithm: '{spec}' is named '{rule.name}', as another algorithm is; give it a name of its own"
        )
    for f in dataclasses.fields(rule.Params):
        if f.name in core:
            raise ConfigError(
                f"algorithm: '{spec}' declares the setting '{f.name}', which is a core setting; rename it"
            )


def anchor_method(cfg: RunConfig) -> str | None:
    """`fedpfn`, `fedpnu` or None: the run's anchor method."""
    return split_algorithm(cfg.algorithm)[0]


def algorithm_names() -> list[str]:
    return [*CLIENT_RULES, *ANCHOR_METHODS]


def _parts(algorithm: str) -> list[Algorithm]:
    anchor, rule = split_algorithm(algorithm)
    return [algorithm_of(CLIENT_RULES[rule])] + ([algorithm_of(ANCHOR_METHODS[anchor])] if anchor else [])


# --- hyperparameters ----------------------------------------------------------------------


def hyper_parts(algorithm: str, server: str) -> list[Part]:
    """The parts an (algorithm, server) pair uses, with the plug-ins' and attacks' (any run may use those)."""
    rule = server_rule(server)
    parts = [(part.client.namespace(), part.client.Params) for part in _parts(algorithm)]
    return parts + [(rule.namespace, rule.Params), *PLUG_INS]


def _spaces_and_names(parts: list[Part]) -> tuple[set[str], set[str]]:
    """The namespaces of `parts`, and the names they declare."""
    return {space for space, _ in parts}, {f.name for _, cls in parts for f in dataclasses.fields(cls)}


def hparam_parts() -> dict[str, type]:
    """Every namespace with its hyperparameter class: of each client rule, anchor method and server rule."""
    parts: dict[str, type] = {}
    clients = [(rule.namespace(), rule.Params) for rule in (*CLIENT_RULES.values(), *ANCHOR_METHODS.values())]
    servers = [(rule.namespace, rule.Params) for rule in (*SERVER_RULES.values(), USER_RULE)]
    for space, cls in [*clients, *servers, *PLUG_INS]:
        known = parts.get(space)
        if known not in (None, cls) and dataclasses.fields(known) and dataclasses.fields(cls):
            raise TypeError(f"namespace '{space}' is declared twice ({known.__name__}, {cls.__name__})")
        if known is None or not dataclasses.fields(known):  # fedavg's client and server: neither has any
            parts[space] = cls
    return parts


def hparam_fields() -> dict[str, dataclasses.Field]:
    """Every declared hyperparameter by its key (`fedprox.prox_mu`) and by its name alone (the flag's,
    read as the first declaration reads it)."""
    fields: dict[str, dataclasses.Field] = {}
    for space, cls in hparam_parts().items():
        for f in dataclasses.fields(cls):
            if f.name in core_fields() or SEP in f.name:
                raise TypeError(f"hyperparameter '{f.name}' of {cls.__name__}: a core setting's name or a '{SEP}'")
            fields[key(space, f.name)] = f
            fields.setdefault(f.name, f)
    return fields


def resolve_hparams(cfg: RunConfig) -> dict[str, Any]:
    """The used hyperparameters as `namespace.name`, defaults filled in, the anchor granularity resolved
    (the plug-ins and attacks only where set, anchor_bias only where off, so a run reads as before them)."""
    values: dict[str, Any] = {}
    anchor = anchor_method(cfg)
    for space, cls in hyper_parts(cfg.algorithm, cfg.server):
        hyper = cfg.hyper(space, cls)
        recorded = {PluginParams: plugin_values, AttackParams: attack_values, AnchorParams: anchor_values}
        own = recorded.get(cls, dataclasses.asdict)(hyper)
        if space == anchor and own.get("anchor_granularity") is None:
            own["anchor_granularity"] = ANCHOR_METHODS[anchor].default_granularity  # type: ignore
        values.update({key(space, name): value for name, value in own.items()})
    return values


def unused_hparams(cfg: RunConfig, given: set[str] | None = None) -> list[str]:
    """A hyperparameter given (by name or key) that no part of the run declares: refused, never ignored."""
    parts = hyper_parts(cfg.algorithm, cfg.server)
    spaces, names = _spaces_and_names(parts)
    fields = hparam_fields()
    return [
        f"{text}: {value} is set, but {cfg.algorithm} with server {cfg.server} does not use it"
        for text, value in cfg.hparams.items()
        if not (split_key(text)[0] in spaces if SEP in text else text in names)
        and is_set(text, value, fields[text].default, given)
    ]


# --- building and checking a config -------------------------------------------------------------


def parse_config(values: dict[str, Any], given: set[str] | None = None) -> RunConfig:
    """A config from loosely typed values (keys with '-' or '_'); every problem at once, unchecked otherwise."""
    values = dotted(values)  # a preset's [fedprox] table as fedprox.prox_mu
    named = str(values.get("algorithm", ""))
    if ":" in named:  # a user's rule: imported first, so that its hyperparameters parse
        split_algorithm(named)
    cfg, unparsed = RunConfig.parse(values, hparam_fields())
    if unparsed:  # what did not parse, and what the rest fails (not what reads a value that did not parse)
        failed = {line.split(":")[0] for line in unparsed}
        raise ConfigError("\n".join(one_per_setting(unparsed + problems(cfg, given, failed))))
    return cfg


def validated(cfg: RunConfig, given: set[str] | None = None) -> RunConfig:
    """`cfg` with its algorithms' hyperparameters resolved and its start file's sha256 recorded
    (`--init`: checked against the file where recorded), or ConfigError listing every problem.

    `given`: the settings the user named (fedpfn.core.settings.is_set), None where that is not known."""
    found = problems(cfg, given)
    if found:
        raise ConfigError("\n".join(found))
    start = cfg.start
    if isinstance(start, Start) and start.init_sha256 is None:
        start = dataclasses.replace(start, init_sha256=file_sha256(start.init))
    return dataclasses.replace(cfg, hparams=resolve_hparams(cfg), start=start)


def load_config(values: dict[str, Any]) -> RunConfig:
    """A checked config from loosely typed values: what every entry point builds."""
    return validated(parse_config(values))


def config_from_json(text: str) -> RunConfig:
    """The config a train message carries (already checked where the run started): the server's
    word, so the code it names is the command's (fedpfn.core.user_code)."""
    values = json.loads(text)
    name_code(*code_settings(values))
    return parse_config(values)


def for_algorithm(cfg: RunConfig, algorithm: str) -> RunConfig:
    """The same settings for another algorithm, keeping only the hyperparameters it uses: a name
    given alone reaches each of its parts that declares it."""
    parts = hyper_parts(algorithm, cfg.server)
    spaces, names = _spaces_and_names(parts)
    kept = {k: v for k, v in cfg.hparams.items() if (split_key(k)[0] in spaces if SEP in k else k in names)}
    return dataclasses.replace(cfg, algorithm=algorithm, hparams=kept)


def problems(cfg: RunConfig, given: set[str] | None = None, unknown: set[str] | None = None) -> list[str]:
    """Every reason `cfg` cannot run: its core settings' and what the algorithms say, one line a setting."""
    return one_per_setting(cfg.problems(given, unknown or ()) + _algorithm_problems(cfg, given))


def _algorithm_problems(cfg: RunConfig, given: set[str] | None = None) -> list[str]:
    """Names, optimizer, the algorithms' hyperparameters."""
    try:
        rule = split_algorithm(cfg.algorithm)[1]
    except ConfigError as err:
        return [str(err)]
    if rule not in CLIENT_RULES or "+" in rule:
        return [
            f"algorithm: unknown '{cfg.algorithm}'; use one of {', '.join(algorithm_names())}, "
            f"METHOD+RULE with METHOD in {', '.join(ANCHOR_METHODS)} (e.g. fedpfn+fedprox), "
            "or a rule of your own as package.module:Class"
        ]
    out = []
    try:
        used = hyper_parts(cfg.algorithm, cfg.server)
        attack_class(attack_of(cfg).attack)  # a user's attack imported here, as a user's server is
    except ConfigError as err:
        return [str(err)]
    client = CLIENT_RULES[rule]
    if cfg.local.optimizer not in client.optimizers:
        out.append(
            f"optimizer: {rule} is defined for {', '.join(client.optimizers)} only, not '{cfg.local.optimizer}' "
            "(its rule assumes SGD steps)"
        )
    for space, cls in used:
        out += setting_problems(cfg.hyper(space, cls))
    for part in _parts(cfg.algorithm):
        out += part.client.problems(cfg.hyper(part.client.namespace(), part.client.Params))
    out += _personal_problems(cfg) + attack_problems(attack_of(cfg), cfg.federation.num_clients, given)
    out += unused_hparams(cfg, given)
    if not out and ":" in cfg.server:
        out += _user_strategy_problems(cfg)
    return out + ([] if out else plugin_problems(cfg, given, client_rules(cfg)))


def _personal_problems(cfg: RunConfig) -> list[str]:
    """Per-client entries with a rule that reads the global model as every client's start, or a
    rule's personal layers on a model without any."""
    task, rules = cfg.task, client_rules(cfg)
    layers = [kind for cls in rules for kind in cls.personal_layers]
    if not (task.personal or layers):
        return []
    if not all(cls.personal_start for cls in rules):
        able = [name for name, cls in {**CLIENT_RULES, **ANCHOR_METHODS}.items() if cls.personal_start]
        name = "personal" if task.personal else "algorithm"
        line = f"{name}: {cfg.algorithm} reads the global model as each client's start; per-client entries run with "
        return [line + ", ".join(able) + " only"]
    if layers and not personal_entries(meta_model(task.model, task.dataset, task.projection_head), "", layers):
        kinds = ", ".join(kind.__name__.lstrip("_") for kind in layers)
        return [f"algorithm: {cfg.algorithm} keeps {kinds} layers local, but {task.model} has none"]
    return []


def _user_strategy_problems(cfg: RunConfig) -> list[str]:
    try:
        build_inner(cfg)
    except ConfigError as err:
        return [str(err)]
    return []


def flower_run_config() -> dict[str, Any]:
    """`[tool.flwr.app.config]` as pyproject.toml must declare it: every setting, "" for None; a
    hyperparameter by its key with its default, and by its name alone with "" (not given: `prox-mu=0.1`
    sets the run's algorithm's, as the flag does; fedpfn.core.hyper)."""
    fields = hparam_fields()
    core = {name: f.default for name, f in core_fields().items()}
    alone = {name: "" for name in fields if SEP not in name}
    spaced = {name: f.default for name, f in fields.items() if SEP in name}
    declared = {**core, **alone, **spaced}
    return {name.replace("_", "-"): "" if value is None else value for name, value in declared.items()}


def from_run_config(run_config: dict[str, Any]) -> dict[str, Any]:
    """Flower's run config as settings: a hyperparameter by name left at pyproject's "" is not given."""
    alone = {name for name in hparam_fields() if SEP not in name}
    return {k: v for k, v in run_config.items() if not (v == "" and str(k).replace("-", "_") in alone)}


# --- building the two sides -------------------------------------------------------------------


def client_rules(cfg: RunConfig) -> list[type[ClientRule]]:
    """The client side of `cfg.algorithm`: its rule, then its anchor method, then the run's attack
    (clients.attacks), last so that it sees what the client would send and train on."""
    attack = attack_class(attack_of(cfg).attack)
    return [part.client for part in _parts(cfg.algorithm)] + ([attack] if attack is not None else [])


def build_inner(cfg: RunConfig) -> Strategy:
    rule = server_rule(cfg.server)
    return build_inner_strategy(cfg.server, cfg.hyper(rule.namespace, rule.Params))


def personal_of(cfg: RunConfig, model: nn.Module) -> frozenset[str]:
    """The entries the run's clients keep for themselves: `personal`'s and their rules' layers'."""
    return personal_entries(model, cfg.task.personal, [kind for cls in client_rules(cfg) for kind in cls.personal_layers])


def build_strategy(cfg: RunConfig, model: nn.Module) -> ComposedStrategy | WrappedStrategy:
    """The server algorithm with the server parts of the client rule and the anchors, then the
    personal entries' part (where the clients keep some)."""
    personal = personal_of(cfg, model)
    context = lambda part: ServerContext(  # noqa: E731
        cfg, model, cfg.hyper(part.client.namespace(), part.client.Params), part.client, personal
    )
    used = _parts(cfg.algorithm)
    parts = [part.server(context(part)) for part in used if part.server is not None]
    if personal:
        parts.append(PersonalServer(context(used[0])))
    names = [name for name, _ in model.named_parameters()]
    inner = build_inner(cfg)
    registration = registration_of(inner)
    state = registration.state if registration is not None else None
    return wrapped(cfg, ComposedStrategy(inner, parts, names, state, cfg.federation.round_timeout or None))


def mean_based(cfg: RunConfig) -> bool:
    """Whether the run's server side aggregates by the example-weighted mean alone (a wrapper reads
    every reply: Flower's DP wrappers clip each client's update)."""
    return server_rule(cfg.server).mean_based and not plugins_of(cfg).server_wrap


def state_keys(cfg: RunConfig) -> tuple[str, ...]:
    """The records the algorithm's clients keep across rounds (checked on resume)."""
    personal = cfg.task.personal or any(cls.personal_layers for cls in client_rules(cfg))
    return tuple(key for cls in client_rules(cfg) for key in cls.state_keys) + ((PERSONAL,) if personal else ())


def _toml_value(value: Any) -> str:
    return json.dumps(value) if not isinstance(value, bool) else str(value).lower()


if __name__ == "__main__":  # python -m fedpfn.runtime.algorithms: print pyproject's table
    print("[tool.flwr.app.config]")
    for key, value in flower_run_config().items():
        print(f"{key} = {_toml_value(value)}")
    sys.exit(0)
