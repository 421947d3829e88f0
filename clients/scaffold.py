"""SCAFFOLD (Karimireddy et al., ICML 2020), option II, as hooks on FedAvg's loop.

The server sends its control variate c (record SCAFFOLD_C, parameters only); the client
keeps its own c_i across rounds (zeros in its first round). Every step's gradient is
corrected by (c − c_i); after K steps at learning rate lr the client sets

    c_i⁺ = c_i − c + (x − y_i) / (K·lr)

and sends Δc_i = c_i⁺ − c_i back (record SCAFFOLD_DELTA) for the server's c
(strategies/scaffold.py, which reads both record names from here).

The paper's local optimizer is plain SGD. With SGD momentum beta (0.9 by default here)
K steps move the weights about 1/(1 − beta) times further, so K is replaced by the
momentum-equivalent step count K_eff (`fedpfn.core.training.effective_steps`; K_eff = K
when beta = 0); with K itself the control variates come out ~10x too large and training
diverges within three rounds (measured: MLP on Fashion-MNIST, accuracy 0.66 -> 0.20 -> 0.10).
Adam's steps have no such equivalent, so SCAFFOLD is defined for SGD only.

An entry that did not train this round (`Trained.frozen`: the anchors) keeps its c_i (Δc_i = 0
there): the literal rule would set c_i − c, shrinking the server's c on every such entry.
"""

from __future__ import annotations

import torch

from clients.base import (
    Arrays,
    ClientRound,
    ClientRule,
    Round,
    Trained,
    client_rule,
    prefixed,
    tensors_of,
    unprefixed,
)
from fedpfn.core.protocol import to_array_record, to_numpy
from fedpfn.core.training import StepView, Tensors, effective_steps

SCAFFOLD_C = "scaffold-c"  # server -> client: the server's control variate c
SCAFFOLD_DELTA = "scaffold-delta"  # client -> server: the change of the client's c_i
CLIENT_C = "scaffold-ci"  # the client's own c_i, kept across rounds


@client_rule
class ScaffoldClient(ClientRule):
    name = "scaffold"
    reply_records = (SCAFFOLD_DELTA,)
    optimizers = ("sgd",)
    state_keys = (CLIENT_C,)

    def __init__(self, this_round: Round) -> None:
        super().__init__(this_round)
        sent = this_round.content.array_records.get(SCAFFOLD_C)
        self.c_global = tensors_of(to_numpy(sent) if sent is not None else None, this_round.start)

    def inputs(self, client: ClientRound) -> Tensors:
        stored = client.state.load(CLIENT_C)
        c_local = tensors_of(to_numpy(stored) if stored is not None else None, self.round.start)
        # the gradient correction is the same at every step: computed once
        correction = {name: self.c_global[name] - c_local[name] for name in c_local}
        scale = effective_steps(client.steps, self.round.cfg.local.momentum) * self.round.lr
        like = next(iter(c_local.values()))
        return {
            **prefixed("c_local", c_local),
            **prefixed("correction", correction),
            "scale": torch.tensor(scale, dtype=like.dtype, device=like.device),
        }

    def correct(self, grads: Tensors, view: StepView, per_client: Tensors) -> Tensors:
        correction = unprefixed("correction", per_client)
        return {name: g.add(correction[name]) for name, g in grads.items()}

    def outputs(self, trained: Trained, per_client: Tensors) -> Tensors:
        start, frozen, c_local = self.round.start, trained.frozen, unprefixed("c_local", per_client)
        new_local, delta = {}, {}
        for name, y in trained.params.items():
            c_i = c_local[name]
            c_plus = c_i - self.c_global[name] + (start[name] - y) / per_client["scale"]
            if name in frozen:
                c_plus = torch.where(frozen[name], c_i, c_plus)
            new_local[name] = c_plus
            delta[name] = c_plus - c_i
        return {**prefixed(CLIENT_C, new_local), **prefixed(SCAFFOLD_DELTA, delta)}

    def save_state(self, client: ClientRound, uploaded: Arrays, outputs: Arrays) -> None:
        client.state.save(CLIENT_C, to_array_record(unprefixed(CLIENT_C, outputs)), self.round.server_round)
