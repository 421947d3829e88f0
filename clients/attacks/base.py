"""Simulated attacks: a seeded fraction of the clients is malicious and says so through the
same protocol as everyone else (issue 43's robust-aggregation study). What an attack is, its
settings and its registry.

Which partitions are malicious is drawn once from the run seed alone (Stream.ATTACK), so
every engine, every process and a resume agree without being told. An attack is a client
part composed after every other (the client's rule, then its anchors:
fedpfn.runtime.algorithms.client_rules), with the hooks of a rule (clients/base.py) and one
more, `labels`, which a cohort calls where it loads a client's batches
(fedpfn.runtime.engines.prepared). A model attack (clients/attacks/model.py) replaces what a
malicious client would send; a data attack (label-flip) changes the labels it trains on and
replies honestly.

An attack registers itself with `@attack`; every module of this package is imported by its
`__init__`, so a new attack is one file. A user's own in any importable module runs by dotted
path (`--attack mypkg.attacks:MyAttack`), under the guard every user's code passes
(fedpfn.core.user_code).
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import torch

from clients.base import ClientRule, Round, Rule, register
from fedpfn.core.seeding import Stream, numpy_rng
from fedpfn.core.settings import ConfigError, above, between, is_set, setting
from fedpfn.core.user_code import import_user_class, is_code

if TYPE_CHECKING:
    from fedpfn.core.config import RunConfig

NONE = "none"  # the attack setting's value where every client is honest
SETTINGS = "attacks"  # AttackParams' namespace: attacks.attack, attacks.attack_fraction (fedpfn.core.hyper)
MALICIOUS = "malicious"  # the per-client flag, and the field of each clients.jsonl row
ATTACKS: dict[str, type[Attack]] = {}  # by what --attack names: a registered one's name, a user's dotted path


def unknown(name: str) -> str | None:
    """Why `name` is no attack (None: none, a registered attack or a dotted path)."""
    if name == NONE or name in ATTACKS or is_code(name):
        return None
    names = ", ".join([NONE, *ATTACKS])
    return f"unknown '{name}'; use one of {names}, or an attack of your own as package.module:Class"


@dataclass(frozen=True)
class AttackParams:
    """The attack a fraction of the clients makes (docs/guide/attacks.md)."""

    attack: str = setting(
        NONE, "simulated attack by a seeded fraction of the clients, g the model received and w the one trained: "
        "sign-flip (sends g - S (w - g)), scaled (g + S (w - g)), gaussian (g + S N(0, 1)), label-flip (trains on "
        "labels y -> C-1-y), or package.module:Class, an attack of your own; none: every client is honest",
        unknown,
    )
    attack_fraction: float = setting(
        0.2, "fraction of the clients that is malicious (drawn from the run seed; clients.jsonl marks them)",
        between(0, 1, low_open=True),
    )
    attack_scale: float | None = setting(None, "S of --attack sign-flip, scaled (the update's factor) and gaussian (the "
                                         "noise's standard deviation); default: 1, 10 and 1", above(0))  # fmt: skip

    @property
    def scale(self) -> float:
        """S, its attack's default where none is given (0 for an attack that reads none)."""
        return self.attack_scale if self.attack_scale is not None else (default_scale(self.attack) or 0.0)


class Attack(ClientRule):
    """A client part that acts for the malicious clients alone (`self.malicious`), composed after
    every other: the honest clients' replies are bit for bit what they would be without it."""

    Params = AttackParams  # every attack reads the run's attack settings
    personal_start = True  # it reads the model received only for the entries every client sends
    default_scale: ClassVar[float | None] = None  # S without --attack-scale; None: it reads no S

    def __init__(self, this_round: Round) -> None:
        super().__init__(this_round)
        cfg = this_round.cfg
        self.malicious = malicious_partitions(self.hyper, cfg.seed, cfg.federation.num_clients)

    @classmethod
    def namespace(cls) -> str:
        """The run's attack settings' namespace, whichever attack runs (attacks.attack_scale)."""
        return SETTINGS

    def labels(self, targets: torch.Tensor, partitions: list[int], num_classes: int) -> torch.Tensor:
        """The labels the clients `partitions` train on: `targets` is one client's batch, or a stack of
        one batch per partition; never called on a test split (evaluation keeps the true labels)."""
        return targets


def attack(cls: Rule) -> Rule:
    """Register an attack under its `name` (the decorator every attack's file uses)."""
    return register(ATTACKS, cls, Attack)


def load_attack(spec: str) -> type[Attack]:
    """A user's attack by dotted path, `package.module:Class`, imported under the guard of a user's
    rule (fedpfn.core.user_code); ConfigError, one line, where it does not load or is not an Attack."""
    kind = "an attack (a subclass of clients.attacks.Attack)"
    cls = import_user_class(spec, "attack", Attack, kind, "attack")
    if cls.Params is not AttackParams:
        raise ConfigError(f"attack: '{spec}'.Params is not AttackParams, the settings every attack reads")
    return cls


def attack_class(name: str) -> type[Attack] | None:
    """The attack `name` gives (None: none); a user's is imported and registered under its path.
    ConfigError, one line, for a name that is no attack or a class that does not load."""
    if name == NONE:
        return None
    if name not in ATTACKS:
        why = unknown(name)
        if why is not None:
            raise ConfigError(f"attack: {why}")
        ATTACKS[name] = load_attack(name)
    return ATTACKS[name]


def default_scale(name: str) -> float | None:
    """S of the attack `name` where --attack-scale is not given; None: it reads no S."""
    cls = attack_class(name)
    return cls.default_scale if cls is not None else None


def attack_of(cfg: RunConfig) -> AttackParams:
    """The run's attack (none: every client honest)."""
    return cfg.hyper(SETTINGS, AttackParams)


def attack_values(params: AttackParams) -> dict[str, Any]:
    """The settings a run records: none without an attack, so such a run reads as before them."""
    if params.attack == NONE:
        return {}
    scale = {"attack_scale": params.scale} if default_scale(params.attack) is not None else {}
    return {"attack": params.attack, "attack_fraction": params.attack_fraction, **scale}


def attack_problems(params: AttackParams, num_clients: int, given: Collection[str] | None) -> list[str]:
    """A setting the attack does not use, or a fraction that makes no client malicious, one line each."""
    defaults = AttackParams()
    scaled = [name for name, cls in ATTACKS.items() if cls.default_scale is not None]  # three at least
    readers = f"{', '.join(scaled[:-1])} or {scaled[-1]}"
    unused = [("attack_fraction", "only --attack uses it", params.attack == NONE),
              ("attack_scale", f"only --attack {readers} uses it", default_scale(params.attack) is None)]  # fmt: skip
    out = [
        f"{name}: {getattr(params, name)} is set, but {why}"
        for name, why, idle in unused
        if idle and is_set(name, getattr(params, name), getattr(defaults, name), given)
    ]
    if not out and params.attack != NONE and malicious_count(params, num_clients) == 0:
        out.append(f"attack_fraction: {params.attack_fraction} of {num_clients} clients is no client; "
                   f"give at least {1 / num_clients:.3g}")  # fmt: skip
    return out


def attack_line(params: AttackParams, num_clients: int) -> list[str]:
    """The run header's line on the attack (none without one), as it shows a DP wrapper."""
    if params.attack == NONE:
        return []
    scale = f", S {params.scale:g}" if default_scale(params.attack) is not None else ""
    return [f"  attack     {params.attack}{scale} by {malicious_count(params, num_clients)} of {num_clients} clients "
            "(drawn from the seed; clients.jsonl marks them)"]  # fmt: skip


def malicious_count(params: AttackParams, num_clients: int) -> int:
    return int(round(params.attack_fraction * num_clients)) if params.attack != NONE else 0


def malicious_partitions(params: AttackParams, run_seed: int, num_clients: int) -> frozenset[int]:
    """The malicious partition ids: drawn from the run seed alone, the same in every process."""
    count = malicious_count(params, num_clients)
    if count == 0:
        return frozenset()
    chosen = numpy_rng(run_seed, Stream.ATTACK).choice(num_clients, size=count, replace=False)
    return frozenset(int(p) for p in chosen)


def mark_malicious(rows: list[dict[str, Any]], params: AttackParams, run_seed: int, num_clients: int) -> None:
    """Each clients.jsonl row gains `malicious` (true or false) in a run with an attack; the rows of a
    run without one stay as they were."""
    if params.attack == NONE:
        return
    malicious = malicious_partitions(params, run_seed, num_clients)
    for row in rows:
        row[MALICIOUS] = int(row["partition_id"]) in malicious
