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

import numpy as np
import torch
from flwr.app import RecordDict
from torch import nn

from clients.base import ClientPart
from fedpfn.core.protocol import to_array_record, to_numpy
from fedpfn.core.settings import above, setting

GRAD = "feddyn-grad"  # the client's ∇L_k(previous local model), kept across rounds


@dataclass(frozen=True)
class FedDynParams:
    feddyn_alpha: float = setting(0.01, "FedDyn regularisation coefficient alpha", above(0))


class FedDynClient(ClientPart):
    name = "feddyn"
    Params = FedDynParams
    state_keys = (GRAD,)

    def begin_round(self, model: nn.Module, content: RecordDict) -> None:
        stored = self.ctx.state.load(GRAD)
        arrays = to_numpy(stored) if stored is not None else {}
        self.dyn_grad = {
            name: torch.from_numpy(np.array(arrays[name], dtype=np.float32)).to(p.device)
            if name in arrays
            else torch.zeros_like(p)
            for name, p in model.named_parameters()
        }

    def loss_term(self, model: nn.Module, inputs: torch.Tensor) -> torch.Tensor | None:
        alpha, start = self.params.feddyn_alpha, self.ctx.global_params
        linear = quadratic = 0.0
        for name, p in model.named_parameters():
            linear = linear + (self.dyn_grad[name] * p).sum()
            quadratic = quadratic + (p - start[name]).pow(2).sum()
        return -linear + 0.5 * alpha * quadratic

    def end_round(self, model: nn.Module, steps: int) -> None:
        alpha, start = self.params.feddyn_alpha, self.ctx.global_params
        with torch.no_grad():
            new = {
                name: (self.dyn_grad[name] - alpha * (p - start[name])).cpu().numpy()
                for name, p in model.named_parameters()
            }
        self.ctx.state.save(GRAD, to_array_record(new), self.ctx.server_round)
