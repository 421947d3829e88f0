"""FedAvg's client rule, the base every client rule and anchor method extends.

A client is its client rule (FedAvg's local SGD, or a small subclass) followed, optionally,
by an anchor method (fedpfn.runtime.algorithms states the composition rule). A rule changes
local training only through hooks, each a function of one client's tensors, so that the
ClientApp calls it on one client and the batched engine on a stack of clients under
`torch.func.vmap` (fedpfn.runtime.engines composes and runs them):

    __init__(this_round)            once per round, from the message the round's clients share
    inputs(client)                  this client's tensors for the round (its state): stacked in a cohort
    start(client, params, buffers)  what this client trains from (default: the model received)
    criterion(logits, targets, ..)  the loss (FedLC); None: cross-entropy
    loss_term(view, per_client)     added to every step's loss (FedProx, FedDyn, MOON)
    correct(grads, ...)             changes every step's gradient (SCAFFOLD)
    after_step(params, ...)         after every optimizer step (the anchor freeze)
    frozen(per_client)              the entries that do not train (the anchors), for the other rules
    outputs(trained, ...)           after the last step: tensors this client keeps or sends
    uploaded(params, ...)           the parameters its reply carries (FedNova's normalised model)
    save_state(client, uploaded, outputs)   on the host: what it keeps for its next round

and two declarations: `reply_records` (outputs every reply carries as records: SCAFFOLD's
delta) and `reply_metrics` (outputs added to its metrics: FedNova's normaliser).
`per_client` is this client's `inputs`; everything on `self` is shared by the round's clients.

A rule registers itself with `@client_rule` (or `@anchor_method`); every module of this
package is imported by its `__init__`, so a new rule is one file. A user's own rule in any
importable module runs by dotted path (`--algorithm mypkg.rules:MyRule`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

import numpy as np
import torch
from flwr.app import RecordDict
from torch import nn

from fedpfn.core.hyper import namespace_of
from fedpfn.core.protocol import Arrays
from fedpfn.core.settings import ConfigError
from fedpfn.core.training import OPTIMIZERS, StepView, Tensors
from fedpfn.core.user_code import import_user_class

if TYPE_CHECKING:
    from clients.state import ClientState
    from fedpfn.core.cache import ClientData
    from fedpfn.core.config import RunConfig



@dataclass(frozen=True)
class NoParams:
    """An algorithm without hyperparameters of its own."""


@dataclass
class Round:
    """What every client of one round shares, decoded once from the round's message; a rule
    reads it as `self.round`.

    Attributes:
        cfg: the run's settings.
        server_round: the round's number, from 1.
        lr: this round's local learning rate as the server sent it (`--lr` times `--lr-decay` a round).
        model: the architecture on the device (its own weights are never used).
        start: the parameters as received, by name (FedProx's proximal term pulls towards them).
        start_buffers: the buffers as received.
        content: the message: server parts' records and config entries.
        personal: entries each client keeps for itself (fedpfn.core.personal).
    """

    cfg: RunConfig
    server_round: int
    lr: float
    model: nn.Module
    start: Tensors
    start_buffers: Tensors
    content: RecordDict
    personal: frozenset[str] = frozenset()


@dataclass
class ClientRound:
    """One client in one round, on the host (what `inputs`, `start` and `save_state` get).

    Attributes:
        partition_id: the client's partition.
        data: its training data.
        state: records kept across this client's rounds (the rule's `state_keys`).
        batches: its minibatches, as indices into `data.x`.
    """

    partition_id: int
    data: ClientData
    state: ClientState
    batches: list[torch.Tensor]

    @property
    def steps(self) -> int:
        return len(self.batches)


@dataclass(frozen=True)
class Trained:
    """One client after its last step (its model as trained, before `uploaded`), as `outputs` gets it.

    Attributes:
        params: the trained parameters, by name.
        buffers: the trained buffers (BatchNorm statistics).
        frozen: entries that did not train this round (the anchor method's `frozen`); a rule
            that keeps per-entry statistics leaves them unchanged there.
    """

    params: Tensors
    buffers: Tensors
    frozen: Tensors


class ClientRule:
    """A client rule or an anchor method: a name, its hyperparameters and hooks (all neutral here).

    Attributes:
        name: what runs call it (`--algorithm NAME`); every rule needs one of its own.
        Params: a frozen dataclass of its hyperparameters, each field a `setting(...)`;
            `self.hyper` is the instance a run set. NoParams: none.
        optimizers: the local optimizers it is defined for (others are refused).
        state_keys: records it keeps across rounds (ClientState): read in `inputs`, written in
            `save_state`.
        personal_layers: layers whose entries every client keeps for itself (FedBN: BatchNorm),
            beside `--personal`.
        personal_start: its hooks hold where a client starts from its own personal entries, not the
            global model's (they never read `round.start` as the client's start); False: refused with them.
        reply_records: `outputs` prefixes each reply carries as a record (SCAFFOLD's delta).
        reply_metrics: `outputs` entries each reply carries as a metric (FedNova's normaliser).
    """

    name: ClassVar[str]
    Params: ClassVar[type] = NoParams
    optimizers: ClassVar[tuple[str, ...]] = OPTIMIZERS
    state_keys: ClassVar[tuple[str, ...]] = ()
    personal_layers: ClassVar[tuple[type[nn.Module], ...]] = ()
    personal_start: ClassVar[bool] = False
    reply_records: ClassVar[tuple[str, ...]] = ()
    reply_metrics: ClassVar[tuple[str, ...]] = ()

    def __init__(self, this_round: Round) -> None:
        self.round = this_round
        # its hyperparameters (an instance of `Params`), never weights: those are `view.params`
        self.hyper: Any = this_round.cfg.hyper(self.namespace(), self.Params)

    @property
    def params(self) -> Any:
        """The old name of `hyper`, refused by name: `params` are weights (`view.params`)."""
        raise AttributeError(f"{type(self).__name__}.params: a rule's hyperparameters are self.hyper "
                             "(its Params as the run set them); view.params are the weights")  # fmt: skip

    @classmethod
    def namespace(cls) -> str:
        """Where a run keeps its hyperparameters: `fedprox.prox_mu` (fedpfn.core.hyper)."""
        return namespace_of(cls.name)

    @classmethod
    def problems(cls, hyper: Any) -> list[str]:
        """Why these hyperparameters make no sense for this part (checked with the config), one line each."""
        return []

    # --- per client, on the host ------------------------------------------------------------

    def inputs(self, client: ClientRound) -> Tensors:
        """This client's tensors for the round, on the device (its state, its step count)."""
        return {}

    def start(self, client: ClientRound, params: Tensors, buffers: Tensors) -> tuple[Tensors, Tensors]:
        """(params, buffers) this client trains from: the model received, its personal entries
        in place; a rule may start elsewhere (its own model of an earlier round)."""
        return params, buffers

    # --- per client, as functions of tensors (vmapped in a cohort) ---------------------------

    def criterion(self, logits: torch.Tensor, targets: torch.Tensor, per_client: Tensors) -> torch.Tensor | None:
        """The batch's loss from its logits, or None: cross-entropy (the first rule's own counts)."""
        return None

    def loss_term(self, view: StepView, per_client: Tensors) -> torch.Tensor | None:
        """A scalar added to every step's loss and differentiated with it (FedProx's proximal
        term); None: nothing."""
        return None

    def correct(self, grads: Tensors, view: StepView, per_client: Tensors) -> Tensors:
        """Every step's gradients by name, changed before the optimizer step (SCAFFOLD adds c - c_i)."""
        return grads

    def after_step(self, params: Tensors, per_client: Tensors) -> Tensors:
        """The parameters after every optimizer step, changed (the anchor freeze writes the anchors back)."""
        return params

    def frozen(self, per_client: Tensors) -> Tensors:
        """The entries this part keeps from training this round (bool masks by parameter name)."""
        return {}

    def outputs(self, trained: Trained, per_client: Tensors) -> Tensors:
        """Tensors this client keeps or sends, by name (`save_state` and the reply read them)."""
        return {}

    def uploaded(self, params: Tensors, per_client: Tensors) -> Tensors:
        """The parameters this client's reply carries (the trained ones unless a rule says otherwise)."""
        return params

    # --- per client, on the host, after training ---------------------------------------------

    def save_state(self, client: ClientRound, uploaded: Arrays, outputs: Arrays) -> None:
        """Save this client's state for its next round (`uploaded`: the model its reply carries)."""

    def upload_mask(self) -> Arrays | None:
        """Entries every reply leaves out (True), known to the server from the round's message."""
        return None


CLIENT_RULES: dict[str, type[ClientRule]] = {}  # by name: FedAvg and the rules that change its loop
ANCHOR_METHODS: dict[str, type[ClientRule]] = {}  # by name: the methods that sit after any rule
Rule = TypeVar("Rule", bound=type[ClientRule])


def client_rule(cls: Rule) -> Rule:
    """Register a client rule under its `name` (the decorator every rule's file uses)."""
    return register(CLIENT_RULES, cls)


def anchor_method(cls: Rule) -> Rule:
    """Register an anchor method under its `name`: it composes after any client rule."""
    return register(ANCHOR_METHODS, cls)


def register(registry: dict[str, Any], cls: Rule, base: type[ClientRule] = ClientRule) -> Rule:
    """Register `cls`, a `base` with a `name` of its own, in `registry` (a rule's, or clients.attacks'):
    no two client parts share a name, so a run's settings and folders say which one ran."""
    if not (isinstance(cls, type) and issubclass(cls, base)) or not isinstance(cls.__dict__.get("name"), str):
        raise TypeError(f"{cls!r} is not a {base.__name__} with a `name` of its own")
    known = registry.get(cls.name) or CLIENT_RULES.get(cls.name) or ANCHOR_METHODS.get(cls.name)
    if known is not None and known is not cls:
        raise TypeError(f"client part '{cls.name}' is registered twice: {known.__module__} and {cls.__module__}")
    registry[cls.name] = cls
    return cls


def load_client_rule(spec: str) -> type[ClientRule]:
    """A user's rule by dotted path, `package.module:Class`, imported but not yet registered (its
    settings are checked against the others' first); a module in the current folder is found, one
    in a run folder never imported (fedpfn.core.user_code). ConfigError, one line, where it does
    not load or is not a ClientRule with a name and a dataclass of settings."""
    kind = "a client rule (a subclass of clients.base.ClientRule)"
    cls = import_user_class(spec, "algorithm", ClientRule, kind, "rule")
    if cls in ANCHOR_METHODS.values():
        raise ConfigError(f"algorithm: '{spec}' is an anchor method; name it as {cls.name}+RULE")
    if not isinstance(cls.__dict__.get("name"), str):
        raise ConfigError(f"algorithm: '{spec}' has no `name` of its own (a str class attribute: what runs call it)")
    if not (isinstance(cls.Params, type) and dataclasses.is_dataclass(cls.Params)):
        raise ConfigError(f"algorithm: '{spec}'.Params is not a dataclass of settings (see clients/fedlc.py)")
    return cls


@client_rule
class FedAvgClient(ClientRule):
    """FedAvg's rule: local SGD from the received model, the whole trained model sent back."""

    name = "fedavg"
    personal_start = True


def prefixed(prefix: str, tensors: Tensors) -> Tensors:
    """`tensors` with their names under `prefix.`: one rule's several per-parameter outputs apart."""
    return {f"{prefix}.{name}": value for name, value in tensors.items()}


def unprefixed(prefix: str, values: dict[str, Any]) -> dict[str, Any]:
    """The entries of `values` under `prefix.`, without it."""
    head = prefix + "."
    return {name[len(head) :]: value for name, value in values.items() if name.startswith(head)}


def tensors_of(arrays: Arrays | None, like: Tensors) -> Tensors:
    """Tensors with `like`'s names, dtypes and device, from saved arrays; zeros where none is saved."""
    arrays = arrays or {}
    return {
        name: torch.from_numpy(np.asarray(arrays[name])).to(device=ref.device, dtype=ref.dtype)
        if name in arrays
        else torch.zeros_like(ref)
        for name, ref in like.items()
    }
