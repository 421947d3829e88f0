"""FedDyn (Acar et al., ICLR 2021), as hooks on FedAvg's loop.

Local objective of client k in round t (paper, eq. 1; signs as in the authors' code,
alpemreacar/FedDyn, which FL-bench's feddyn follows):

    L_k(w) − ⟨∇L_k(w_k^{t−1}), w⟩ + (alpha/2)·||w − w^{t−1}||²

The linear term's vector g = ∇L_k(w_k^{t−1}) is the client's state (zeros in its first
round), updated after training as

    g ← g − alpha·(w_k^t − w^{t−1})

(the authors keep −g/alpha and add w_k − w_global to it: the same thing). alpha is the same
for every client (the authors' code divides it by the client's relative data size; not
done here). Entries that did not train keep their g, since w_k = w there.
The server side (h and the corrected average) is strategies/feddyn.py.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from clients.base import (
    Arrays,
    ClientRound,
    ClientRule,
    Trained,
    client_rule,
    prefixed,
    tensors_of,
    unprefixed,
)
from fedpfn.core.protocol import to_array_record, to_numpy
from fedpfn.core.settings import above, setting
from fedpfn.core.training import StepView, Tensors

GRAD = "feddyn-grad"  # the client's ∇L_k(previous local model), kept across rounds


@dataclass(frozen=True)
class FedDynParams:
    feddyn_alpha: float = setting(0.01, "FedDyn regularisation coefficient alpha", above(0))


@client_rule
class FedDynClient(ClientRule):
    name = "feddyn"
    Params = FedDynParams
    state_keys = (GRAD,)

    def inputs(self, client: ClientRound) -> Tensors:
        stored = client.state.load(GRAD)
        return prefixed(GRAD, tensors_of(to_numpy(stored) if stored is not None else None, self.round.start))

    def loss_term(self, view: StepView, per_client: Tensors) -> torch.Tensor | None:
        alpha, start, dyn_grad = self.hyper.feddyn_alpha, self.round.start, unprefixed(GRAD, per_client)
        linear = quadratic = 0.0
        for name, p in view.params.items():
            linear = linear + (dyn_grad[name] * p).sum()
            quadratic = quadratic + (p - start[name]).pow(2).sum()
        return -linear + 0.5 * alpha * quadratic

    def outputs(self, trained: Trained, per_client: Tensors) -> Tensors:
        alpha, start, dyn_grad = self.hyper.feddyn_alpha, self.round.start, unprefixed(GRAD, per_client)
        return prefixed(GRAD, {name: dyn_grad[name] - alpha * (p - start[name]) for name, p in trained.params.items()})

    def save_state(self, client: ClientRound, uploaded: Arrays, outputs: Arrays) -> None:
        client.state.save(GRAD, to_array_record(unprefixed(GRAD, outputs)), self.round.server_round)
