"""FedDyn (Acar et al., ICLR 2021), as hooks on FedAvg's loop.

Local objective of client k in round t (paper, eq. 1; signs as in the authors' code,
alpemreacar/FedDyn, which FL-bench's feddyn follows):

    L_k(w) − ⟨∇L_k(w_k^{t−1}), w⟩ + (alpha/2)·||w − w^{t−1}||²

The linear term's vector g = ∇L_k(w_k^{t−1}) is the client's state (`feddyn-grad` in
Flower's `context.state`, zeros in its first round), updated after training as

    g ← g − alpha·(w_k^t − w^{t−1})

(the authors keep −g/alpha and add w_k − w_global to it: the same thing). alpha is
cfg.feddyn_alpha for every client (the authors' code divides it by the client's relative
data size; not done here). With anchors, anchored entries did not move, so g is unchanged
there.
"""

from __future__ import annotations

import numpy as np
import torch
from flwr.app import ConfigRecord, RecordDict
from torch import nn

from clients.base import FedAvgClient
from fedpfn.records import to_array_record, to_numpy

GRAD = "feddyn-grad"  # the client's ∇L_k(previous local model), kept in context.state


class FedDynClient(FedAvgClient):
    def begin_round(self, model: nn.Module, content: RecordDict) -> None:
        super().begin_round(model, content)
        stored = self.persistent(GRAD)
        arrays = to_numpy(stored) if stored is not None else {}
        self.dyn_grad = {
            name: (
                torch.from_numpy(np.array(arrays[name], dtype=np.float32)).to(p.device)
                if name in arrays
                else torch.zeros_like(p)
            )
            for name, p in model.named_parameters()
        }

    def loss_term(self, model: nn.Module) -> torch.Tensor | None:
        extra = super().loss_term(model)
        alpha = self.cfg.feddyn_alpha
        linear = quadratic = 0.0
        for name, p in model.named_parameters():
            linear = linear + (self.dyn_grad[name] * p).sum()
            quadratic = quadratic + (p - self.global_params[name]).pow(2).sum()
        dyn = -linear + 0.5 * alpha * quadratic
        return dyn if extra is None else extra + dyn

    def end_round(self, model: nn.Module, config: ConfigRecord, steps: int) -> None:
        super().end_round(model, config, steps)
        alpha = self.cfg.feddyn_alpha
        with torch.no_grad():
            new = {
                name: (self.dyn_grad[name] - alpha * (p - self.global_params[name])).cpu().numpy()
                for name, p in model.named_parameters()
            }
        self.persist(GRAD, to_array_record(new))
