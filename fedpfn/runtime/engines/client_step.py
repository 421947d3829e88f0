"""The rules of one algorithm composed into one client's step: what every engine runs.

A client is its client rule followed, optionally, by an anchor method
(fedpfn.runtime.algorithms states the rule). Their hooks (clients/base.py) compose in that
order: the rule's first and the anchors' last, so the anchor freeze is the last thing after
every optimizer step. Every function here is one client's, of its tensors, so the cohort
calls it as it is (`loop`, `threads`) or under `torch.func.vmap` over stacked clients.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from clients.base import ClientRound, ClientRule, Trained, unprefixed
from fedpfn.core.protocol import Arrays
from fedpfn.core.training import OptimizerSpec, StepOutput, StepView, Tensors, local_step

PerClient = list[Tensors]  # one client's `inputs`, one dict per rule in the rules' order


class ComposedRules:
    """The hooks of a client's rules, each applied in order (the rule first, the anchors last)."""

    def __init__(self, rules: Sequence[ClientRule]) -> None:
        self.rules = list(rules)

    def start(self, client: ClientRound, params: Tensors, buffers: Tensors) -> tuple[Tensors, Tensors]:
        for rule in self.rules:
            params, buffers = rule.start(client, params, buffers)
        return params, buffers

    def criterion(self, logits: torch.Tensor, targets: torch.Tensor, per_client: PerClient) -> torch.Tensor:
        """The first rule's own loss (FedLC's calibrated one), else cross-entropy."""
        for rule, mine in zip(self.rules, per_client):
            loss = rule.criterion(logits, targets, mine)
            if loss is not None:
                return loss
        return F.cross_entropy(logits, targets)

    def loss_term(self, view: StepView, per_client: PerClient) -> torch.Tensor | None:
        terms = [t for t in (rule.loss_term(view, mine) for rule, mine in zip(self.rules, per_client)) if t is not None]
        return sum(terms[1:], terms[0]) if terms else None

    def correct(self, grads: Tensors, view: StepView, per_client: PerClient) -> Tensors:
        for rule, mine in zip(self.rules, per_client):
            grads = rule.correct(grads, view, mine)
        return grads

    def after_step(self, params: Tensors, per_client: PerClient) -> Tensors:
        for rule, mine in zip(self.rules, per_client):
            params = rule.after_step(params, mine)
        return params

    def step(self, model: nn.Module, spec: OptimizerSpec, batched: bool = False) -> Callable[..., StepOutput]:
        """One step of one client as a function of its tensors (what vmap maps over: `batched`).
        A hook no rule has of its own is left out of the step (FedAvg's is local_step alone)."""
        own = {hook: self.has_own(hook) for hook in ("criterion", "loss_term", "correct", "after_step")}

        def one_client(params, buffers, state, per_client, inputs, targets, number):  # noqa: ANN001, ANN202
            return local_step(
                model, params, buffers, state, inputs, targets, number, spec,
                loss_term=(lambda view: self.loss_term(view, per_client)) if own["loss_term"] else None,
                correct=(lambda grads, view: self.correct(grads, view, per_client)) if own["correct"] else None,
                after_step=(lambda p: self.after_step(p, per_client)) if own["after_step"] else None,
                criterion=(lambda logits, y: self.criterion(logits, y, per_client)) if own["criterion"] else None,
                batched=batched,
            )  # fmt: skip

        return one_client

    def has_own(self, hook: str) -> bool:
        """Whether a rule overrides `hook` (ClientRule's does nothing)."""
        return any(getattr(type(rule), hook) is not getattr(ClientRule, hook) for rule in self.rules)

    def finish(self, params: Tensors, buffers: Tensors, per_client: PerClient) -> tuple[Tensors, Tensors]:
        """(the rules' outputs, the uploaded parameters) of one client after its last step."""
        frozen: Tensors = {}
        for rule, mine in zip(self.rules, per_client):
            frozen.update(rule.frozen(mine))
        trained = Trained(params, buffers, frozen)
        outputs: Tensors = {}
        for rule, mine in zip(self.rules, per_client):
            outputs.update(rule.outputs(trained, mine))
        for rule, mine in zip(self.rules, per_client):
            params = rule.uploaded(params, mine)
        return outputs, params

    def reply_records(self, outputs: Tensors) -> dict[str, Tensors]:
        """The records every reply carries, by record name: the rules' declared outputs, stacked."""
        return {key: unprefixed(key, outputs) for rule in self.rules for key in rule.reply_records}

    def reply_metrics(self, outputs: Arrays) -> dict[str, float]:
        """The entries one client's reply metrics gain: the rules' declared outputs, as numbers."""
        return {key: float(outputs[key]) for rule in self.rules for key in rule.reply_metrics}

    def upload_mask(self) -> Arrays | None:
        """The entries every reply leaves out by the rules' choice (FedPNU's anchors)."""
        masks = [m for m in (rule.upload_mask() for rule in self.rules) if m is not None]
        return {name: m for mask in masks for name, m in mask.items()} or None

