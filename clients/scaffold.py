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

from clients.base import Arrays, ClientRound, ClientRule, RoundInfo, Trained, prefixed, tensors_of, unprefixed
from fedpfn.core.protocol import to_array_record, to_numpy
from fedpfn.core.training import StepView, Tensors, effective_steps

SCAFFOLD_C = "scaffold-c"  # server -> client: the server's control variate c
SCAFFOLD_DELTA = "scaffold-delta"  # client -> server: the change of the client's c_i
CLIENT_C = "scaffold-ci"  # the client's own c_i, kept across rounds


class ScaffoldClient(ClientRule):
    name = "scaffold"
    optimizers = ("sgd",)
    state_keys = (CLIENT_C,)

    def __init__(self, info: RoundInfo) -> None:
        super().__init__(info)
        sent = info.content.array_records.get(SCAFFOLD_C)
        self.c_global = tensors_of(to_numpy(sent) if sent is not None else None, info.start)

    def inputs(self, client: ClientRound) -> Tensors:
        stored = client.state.load(CLIENT_C)
        c_local = tensors_of(to_numpy(stored) if stored is not None else None, self.info.start)
        # the gradient correction is the same at every step: computed once
        correction = {name: self.c_global[name] - c_local[name] for name in c_local}
        scale = effective_steps(client.steps, self.info.cfg.momentum) * self.info.lr
        like = next(iter(c_local.values()))
        return {
            **prefixed("c_local", c_local),
            **prefixed("correction", correction),
            "scale": torch.tensor(scale, dtype=like.dtype, device=like.device),
        }

    def correct(self, grads: Tensors, view: StepView, own: Tensors) -> Tensors:
        correction = unprefixed("correction", own)
        return {name: g.add(correction[name]) for name, g in grads.items()}

    def finish(self, trained: Trained, own: Tensors) -> Tensors:
        start, frozen, c_local = self.info.start, trained.frozen, unprefixed("c_local", own)
        new_local, delta = {}, {}
        for name, y in trained.params.items():
            c_i = c_local[name]
            c_plus = c_i - self.c_global[name] + (start[name] - y) / own["scale"]
            if name in frozen:
                c_plus = torch.where(frozen[name], c_i, c_plus)
            new_local[name] = c_plus
            delta[name] = c_plus - c_i
        return {**prefixed(CLIENT_C, new_local), **prefixed(SCAFFOLD_DELTA, delta)}

    def keep(self, client: ClientRound, sent: Arrays, outputs: Arrays) -> None:
        client.state.save(CLIENT_C, to_array_record(unprefixed(CLIENT_C, outputs)), self.info.server_round)

    def reply(self, outputs: Tensors) -> dict[str, Tensors]:
        return {SCAFFOLD_DELTA: unprefixed(SCAFFOLD_DELTA, outputs)}
