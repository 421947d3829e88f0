"""The one local training loop, shared by every client algorithm and by the analysis tools.

Algorithms differ only in the hooks they pass: an extra loss term (FedProx, FedDyn, MOON),
a gradient correction (SCAFFOLD) and an after-step action (the anchor freeze).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Protocol

import torch
import torch.nn.functional as F
from torch import nn


class TrainHooks(Protocol):
    def loss_term(self, model: nn.Module, inputs: torch.Tensor) -> torch.Tensor | None: ...

    def after_backward(self, model: nn.Module) -> None: ...

    def after_step(self, model: nn.Module) -> None: ...


class NoHooks:
    """Plain SGD: nothing added to the loop."""

    def loss_term(self, model: nn.Module, inputs: torch.Tensor) -> torch.Tensor | None:
        return None

    def after_backward(self, model: nn.Module) -> None:
        pass

    def after_step(self, model: nn.Module) -> None:
        pass


class CompositeHooks:
    """Several parts' hooks, called in order; their loss terms add up."""

    def __init__(self, parts: Sequence[TrainHooks]) -> None:
        self.parts = list(parts)

    def loss_term(self, model: nn.Module, inputs: torch.Tensor) -> torch.Tensor | None:
        terms = [t for t in (part.loss_term(model, inputs) for part in self.parts) if t is not None]
        return sum(terms[1:], terms[0]) if terms else None

    def after_backward(self, model: nn.Module) -> None:
        for part in self.parts:
            part.after_backward(model)

    def after_step(self, model: nn.Module) -> None:
        for part in self.parts:
            part.after_step(model)


@dataclass(frozen=True)
class TrainResult:
    loss: float  # mean cross-entropy over the steps (without hook terms)
    accuracy: float  # fraction of training samples classified right while training
    steps: int


def make_optimizer(
    model: nn.Module, name: str, lr: float, momentum: float, weight_decay: float
) -> torch.optim.Optimizer:
    params = [p for p in model.parameters() if p.requires_grad]
    if name == "adam":
        return torch.optim.Adam(params, lr=lr, weight_decay=weight_decay)
    return torch.optim.SGD(params, lr=lr, momentum=momentum, weight_decay=weight_decay)


def minibatches(
    indices: torch.Tensor, batch_size: int, epochs: int, generator: torch.Generator
) -> Iterator[torch.Tensor]:
    """Index batches over `epochs` seeded shuffles; the order is a function of the seed only."""
    for _ in range(epochs):
        order = indices[torch.randperm(len(indices), generator=generator)]
        yield from order.split(batch_size)


def train_local(
    model: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    batches: Iterator[torch.Tensor],
    optimizer: torch.optim.Optimizer,
    hooks: TrainHooks = NoHooks(),
) -> TrainResult:
    """Train on `x[batch], y[batch]` for each index batch.

    Indexing the full tensors per batch avoids materialising a client's partition.
    """
    model.train()
    device = next(model.parameters()).device
    total_loss = torch.zeros((), device=device)
    correct = torch.zeros((), device=device, dtype=torch.int64)
    steps = seen = 0
    for batch in batches:
        batch = batch.to(x.device)
        inputs, targets = x[batch].to(device, non_blocking=True), y[batch].to(device, non_blocking=True)
        optimizer.zero_grad(set_to_none=True)
        logits = model(inputs)
        loss = F.cross_entropy(logits, targets)
        total_loss += loss.detach()
        correct += (logits.detach().argmax(1) == targets).sum()
        extra = hooks.loss_term(model, inputs)
        if extra is not None:
            loss = loss + extra
        loss.backward()
        hooks.after_backward(model)
        optimizer.step()
        hooks.after_step(model)
        steps += 1
        seen += len(batch)
    return TrainResult(float(total_loss) / max(steps, 1), int(correct) / max(seen, 1), steps)


@torch.no_grad()
def evaluate(
    model: nn.Module, x: torch.Tensor, y: torch.Tensor, batch_size: int = 256
) -> tuple[float, float]:
    """(mean cross-entropy, accuracy in [0, 1]) of `model` on the whole of (x, y)."""
    model.eval()
    device = next(model.parameters()).device
    loss_sum = torch.zeros((), device=device, dtype=torch.float64)
    correct = torch.zeros((), device=device, dtype=torch.int64)
    for start in range(0, len(y), batch_size):
        inputs = x[start : start + batch_size].to(device, non_blocking=True)
        targets = y[start : start + batch_size].to(device, non_blocking=True)
        logits = model(inputs)
        loss_sum += F.cross_entropy(logits, targets, reduction="sum").double()
        correct += (logits.argmax(1) == targets).sum()
    return float(loss_sum) / len(y), int(correct) / len(y)


def pick_device(want_gpu: bool = True) -> torch.device:
    """CUDA when present (and wanted), else the CPU."""
    return torch.device("cuda" if want_gpu and torch.cuda.is_available() else "cpu")
