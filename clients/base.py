"""FedAvg's client rule, the base every client rule and anchor method extends.

A client is its client rule (FedAvg's local SGD, or a small subclass) followed, optionally,
by an anchor method (fedpfn.runtime.algorithms states the composition rule). A rule changes
local training only through hooks, each a function of one client's tensors, so that the
sequential ClientApp calls it on one client and the batched engine on a stack of clients
under `torch.func.vmap` (clients/program.py runs both):

    __init__(round)        once per round, from the message the round's clients share
    inputs(client)         this client's tensors for the round (its state): stacked in a cohort
    loss_term(view, own)   added to every step's cross-entropy (FedProx, FedDyn, MOON)
    correct(grads, ...)    changes every step's gradient (SCAFFOLD)
    after_step(params)     after every optimizer step (the anchor freeze)
    frozen(own)            the entries that do not train (the anchors), for the other rules
    finish(trained, own)   after the last step: tensors to keep or send (SCAFFOLD's c_i)
    upload(trained, own)   the parameters the reply carries (FedNova's normalised update)
    reply(outputs)         the records every reply carries, from the stacked outputs
    keep / metrics         on the host, per client: state saved, metrics added to the reply

`own` is this client's `inputs`, everything else on `self` is shared by the round's clients.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
import torch
from flwr.app import RecordDict
from torch import nn

from fedpfn.core.training import OPTIMIZERS, StepView, Tensors

if TYPE_CHECKING:
    from clients.state import ClientState
    from fedpfn.core.cache import ClientData
    from fedpfn.core.config import RunConfig

Arrays = dict[str, np.ndarray]


@dataclass(frozen=True)
class NoParams:
    """An algorithm without hyperparameters of its own."""


@dataclass
class RoundInfo:
    """What every client of one round shares, decoded once from the round's message."""

    cfg: RunConfig
    server_round: int
    lr: float
    model: nn.Module  # the architecture on the device (its own weights are never used)
    start: Tensors  # the parameters as received
    start_buffers: Tensors  # the buffers as received
    content: RecordDict  # the message: server parts' records and config entries
    personal: frozenset[str] = frozenset()  # entries each client keeps (fedpfn.core.personal)


@dataclass
class ClientRound:
    """One client in one round, on the host."""

    partition_id: int
    data: ClientData
    state: ClientState  # records kept across this client's rounds
    batches: list[torch.Tensor]  # its minibatches, as indices into data.x

    @property
    def steps(self) -> int:
        return len(self.batches)


@dataclass(frozen=True)
class Trained:
    """One client after its last step (its model as trained, before `upload`)."""

    params: Tensors
    buffers: Tensors
    # entries that did not train this round (the anchor method's `frozen`); a rule that
    # keeps per-entry statistics leaves them unchanged there
    frozen: Tensors


class ClientRule:
    """A client rule or an anchor method: a name, its hyperparameters and hooks (all neutral here)."""

    name: ClassVar[str]
    Params: ClassVar[type] = NoParams
    optimizers: ClassVar[tuple[str, ...]] = OPTIMIZERS  # local optimizers it is defined for
    state_keys: ClassVar[tuple[str, ...]] = ()  # records it keeps across rounds (ClientState)
    # layers whose entries every client keeps for itself (FedBN: BatchNorm), beside `--personal`
    personal_layers: ClassVar[tuple[type[nn.Module], ...]] = ()
    # its hooks hold where a client starts from its own personal entries, not the global
    # model's (they never read `info.start` as the client's start); False: refused with them
    personal_start: ClassVar[bool] = False

    def __init__(self, info: RoundInfo) -> None:
        self.info = info
        self.params: Any = info.cfg.params(self.Params)

    @classmethod
    def problems(cls, params: Any) -> list[str]:
        """Why these hyperparameters make no sense for this part (checked with the config), one line each."""
        return []

    # --- per client, on the host ------------------------------------------------------------

    def inputs(self, client: ClientRound) -> Tensors:
        """This client's tensors for the round, on the device (its state, its step count)."""
        return {}

    # --- per client, as functions of tensors (vmapped in a cohort) ---------------------------

    def loss_term(self, view: StepView, own: Tensors) -> torch.Tensor | None:
        return None

    def correct(self, grads: Tensors, view: StepView, own: Tensors) -> Tensors:
        return grads

    def after_step(self, params: Tensors, own: Tensors) -> Tensors:
        return params

    def finish(self, trained: Trained, own: Tensors) -> Tensors:
        """Tensors this client keeps or sends, by name (`keep` and `reply` read them)."""
        return {}

    def frozen(self, own: Tensors) -> Tensors:
        """The entries this part keeps from training this round (bool masks by parameter name)."""
        return {}

    def upload(self, params: Tensors, own: Tensors) -> Tensors:
        """The parameters this client's reply carries (the trained ones unless a rule says otherwise)."""
        return params

    # --- per client, on the host, after training ---------------------------------------------

    def keep(self, client: ClientRound, sent: Arrays, outputs: Arrays) -> None:
        """Save this client's state for its next round (`sent`: the model its reply carries)."""

    def reply(self, outputs: Tensors) -> dict[str, Tensors]:
        """Records added to every client's reply, by record name, from the stacked `finish` outputs."""
        return {}

    def metrics(self, outputs: Arrays) -> dict[str, float]:
        """Entries added to this client's reply metrics."""
        return {}

    def upload_mask(self) -> Arrays | None:
        """Entries every reply leaves out (True), known to the server from the round's message."""
        return None


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
