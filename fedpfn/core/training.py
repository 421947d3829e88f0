"""The one local training step, as functions of tensors, and evaluation.

Every engine trains with these functions: the sequential ClientApp calls them on one client,
the batched engine calls the same functions under `torch.func.vmap` on a stack of clients,
and the analysis tools (fusion, LMC) on one model. A step is

    grads = ∇ [ criterion(logits, targets) + loss_term ]         (criterion: cross-entropy, FedLC's;
                                                                  loss_term: FedProx, FedDyn, MOON)
    grads = correct(grads)                                       (SCAFFOLD)
    params, state = optimizer_step(params, grads, state)         (SGD with momentum and weight decay, Adam)
    params = after_step(params)                                  (the anchor freeze)

Parameters are dicts of tensors, never modules, so a stack of K clients is the same dict with
a leading client dimension. BatchNorm running statistics are buffers passed through the
functional call and updated in place, as a module's would be. The optimizers repeat
torch.optim's single-tensor arithmetic operation by operation, so one client trained here
equals `torch.optim.SGD` / `Adam` bit for bit on the CPU, and the stacked update equals K
separate ones (every operation is element-wise).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call, grad

Tensors = dict[str, torch.Tensor]
Criterion = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]  # (logits, targets) -> the batch's loss
LossTerm = Callable[["StepView"], "torch.Tensor | None"]
Correction = Callable[[Tensors, "StepView"], Tensors]
AfterStep = Callable[[Tensors], Tensors]
OPTIMIZERS = ("sgd", "adam")


@dataclass(frozen=True)
class OptimizerSpec:
    """A local optimizer for one round (a new one every round, as FL clients have)."""

    name: str  # sgd | adam
    lr: float
    momentum: float = 0.0  # SGD's
    weight_decay: float = 0.0
    betas: tuple[float, float] = (0.9, 0.999)  # Adam's, torch's defaults
    eps: float = 1e-8


@dataclass(frozen=True)
class StepView:
    """What a loss term or a gradient correction may read in one step of one client.

    Attributes:
        model: the architecture, for extra functional forwards (MOON).
        params: the parameters being differentiated, by name.
        logits: the batch's logits.
        features: the classifier's input (the model's representation).
        inputs: the batch.
        targets: its labels.
    """

    model: nn.Module
    params: Tensors
    logits: torch.Tensor
    features: torch.Tensor
    inputs: torch.Tensor
    targets: torch.Tensor


def forward(
    model: nn.Module, params: Tensors, buffers: Tensors, inputs: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """(logits, features) of `model` with these weights; buffers update in place in train mode."""
    return functional_call(model, (params, buffers), (inputs,), {"with_features": True}, strict=True)


@torch.no_grad()
def target_features(model: nn.Module, params: Tensors, buffers: Tensors, inputs: torch.Tensor) -> torch.Tensor:
    """The features of a fixed model (evaluation mode, no gradient): a target, not a learner."""
    was_training = model.training
    model.eval()
    try:
        return forward(model, params, buffers, inputs)[1]
    finally:
        model.train(was_training)


def optimizer_state(spec: OptimizerSpec, params: Tensors) -> Tensors:
    """The optimizer's per-entry state before the first step (SGD's buffer starts at step 1)."""
    if spec.name == "adam":
        zeros = {f"exp_avg.{n}": torch.zeros_like(p) for n, p in params.items()}
        return {**zeros, **{f"exp_avg_sq.{n}": torch.zeros_like(p) for n, p in params.items()}}
    return {}


def optimizer_step(
    spec: OptimizerSpec, params: Tensors, grads: Tensors, state: Tensors, step: int
) -> tuple[Tensors, Tensors]:
    """One update of every parameter; `step` counts from 1. Returns new tensors, touches none."""
    if spec.name == "adam":
        return _adam(spec, params, grads, state, step)
    return _sgd(spec, params, grads, state, step)


def _sgd(spec: OptimizerSpec, params: Tensors, grads: Tensors, state: Tensors, step: int) -> tuple[Tensors, Tensors]:
    new_params, new_state = {}, {}
    for name, p in params.items():
        d = grads[name] if spec.weight_decay == 0 else grads[name].add(p, alpha=spec.weight_decay)
        if spec.momentum != 0:
            d = d.clone() if step == 1 else state[name].mul(spec.momentum).add(d, alpha=1)
            new_state[name] = d
        new_params[name] = p.add(d, alpha=-spec.lr)
    return new_params, new_state


def _adam(spec: OptimizerSpec, params: Tensors, grads: Tensors, state: Tensors, step: int) -> tuple[Tensors, Tensors]:
    beta1, beta2 = spec.betas
    step_size = spec.lr / (1 - beta1**step)
    bias_correction2_sqrt = (1 - beta2**step) ** 0.5
    new_params, new_state = {}, {}
    for name, p in params.items():
        g = grads[name] if spec.weight_decay == 0 else grads[name].add(p, alpha=spec.weight_decay)
        m = state[f"exp_avg.{name}"].lerp(g, 1 - beta1)
        v = state[f"exp_avg_sq.{name}"].mul(beta2).addcmul(g, g, value=1 - beta2)
        denom = (v.sqrt() / bias_correction2_sqrt).add(spec.eps)
        new_params[name] = p.addcdiv(m, denom, value=-step_size)
        new_state[f"exp_avg.{name}"], new_state[f"exp_avg_sq.{name}"] = m, v
    return new_params, new_state


def effective_steps(steps: int, momentum: float) -> float:
    """K, or with SGD momentum beta the plain-SGD steps a displacement of K steps is worth.

    From a zero momentum buffer, K steps under a constant gradient g move the weights by
    lr·g·Σ_{k=1..K} (1 − beta^k)/(1 − beta) = lr·g·(K − beta(1 − beta^K)/(1 − beta))/(1 − beta):
    SCAFFOLD divides a client's displacement by it, and it is FedNova's normaliser a_i.
    """
    if momentum == 0:
        return float(steps)
    return (steps - momentum * (1 - momentum**steps) / (1 - momentum)) / (1 - momentum)


def freeze(params: Tensors, anchors: Tensors, masks: Tensors) -> Tensors:
    """`params` with every masked entry put back to its anchor value (a selection: exact)."""
    return {n: torch.where(masks[n], anchors[n], p) if n in masks else p for n, p in params.items()}


@dataclass(frozen=True)
class StepOutput:
    params: Tensors
    optimizer_state: Tensors
    loss: torch.Tensor  # the batch's criterion (mean cross-entropy by default), without the loss terms
    correct: torch.Tensor  # how many of the batch's samples the model classified right


def local_step(
    model: nn.Module,
    params: Tensors,
    buffers: Tensors,
    state: Tensors,
    inputs: torch.Tensor,
    targets: torch.Tensor,
    step: int,
    spec: OptimizerSpec,
    loss_term: LossTerm | None = None,
    correct: Correction | None = None,
    after_step: AfterStep | None = None,
    criterion: Criterion | None = None,
    batched: bool = False,
) -> StepOutput:
    """One optimizer step of one client on one batch (see the module docstring); `batched`: called
    under `torch.func.vmap` (a stack of clients), so differentiated by `torch.func.grad`."""

    def objective(p: Tensors, b: Tensors) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
        logits, features = forward(model, p, b, inputs)
        ce = criterion(logits, targets) if criterion is not None else F.cross_entropy(logits, targets)
        extra = loss_term(StepView(model, p, logits, features, inputs, targets)) if loss_term else None
        return (ce if extra is None else ce + extra), (ce.detach(), logits.detach(), features.detach())

    # the buffers are an argument, not captured: BatchNorm updates them in place, which a
    # grad transform allows only on its inputs
    differentiate = grad(objective, has_aux=True) if batched else partial(_autograd, objective)
    grads, (ce, logits, features) = differentiate(params, buffers)
    if correct is not None:
        grads = correct(grads, StepView(model, params, logits, features, inputs, targets))
    new_params, new_state = optimizer_step(spec, params, grads, state, step)
    if after_step is not None:
        new_params = after_step(new_params)
    return StepOutput(new_params, new_state, ce, (logits.argmax(1) == targets).sum())


def _autograd(objective: Callable[[Tensors, Tensors], tuple[torch.Tensor, Any]], params: Tensors, buffers: Tensors) -> tuple[Tensors, Any]:
    """`torch.func.grad(objective, has_aux=True)(params, buffers)` for one client, by plain autograd:
    the same kernels, so the same bits, without the transform's cost on every call (about 0.7 ms
    of a 2.2 ms step of the MLP on one CPU thread). An entry the loss does not reach gets a zero
    gradient, as under the transform."""
    leaves = {name: p.detach().requires_grad_() for name, p in params.items()}
    with torch.enable_grad():
        loss, aux = objective(leaves, buffers)
        found = torch.autograd.grad(loss, list(leaves.values()), allow_unused=True)
    grads = {name: torch.zeros_like(leaves[name]) if g is None else g for name, g in zip(leaves, found)}
    return grads, aux


def minibatches(
    indices: torch.Tensor, batch_size: int, epochs: int, generator: torch.Generator
) -> Iterator[torch.Tensor]:
    """Index batches over `epochs` seeded shuffles; the order is a function of the seed only."""
    for _ in range(epochs):
        order = indices[torch.randperm(len(indices), generator=generator)]
        yield from order.split(batch_size)


@dataclass
class Tally:
    """One model's running figures while it trains: summed batch losses and hits, samples seen."""

    loss: torch.Tensor
    correct: torch.Tensor
    steps: int = 0
    seen: int = 0

    @classmethod
    def zeros(cls, device: torch.device, dtype: torch.dtype = torch.float32) -> Tally:
        return cls(torch.zeros((), device=device, dtype=dtype), torch.zeros((), device=device, dtype=torch.int64))

    def add(self, out: StepOutput, samples: int) -> None:
        self.loss += out.loss
        self.correct += out.correct
        self.steps += 1
        self.seen += samples

    @property
    def mean_loss(self) -> float:
        return float(self.loss) / max(self.steps, 1)

    @property
    def accuracy(self) -> float:
        return int(self.correct) / max(self.seen, 1)


Step = Callable[[Tensors, Tensors, torch.Tensor, torch.Tensor, int], StepOutput]  # (params, state, inputs, targets, step)
Load = Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor]]  # index batch -> (inputs, targets) on the device


def run_steps(
    step: Step, params: Tensors, state: Tensors, batches: Iterable[torch.Tensor], load: Load, tally: Tally
) -> tuple[Tensors, Tensors]:
    """THE loop around the one step, for one model: every engine's client and every analysis
    tool trains through it. Returns the parameters and optimizer state after the last batch."""
    for batch in batches:
        inputs, targets = load(batch)
        out = step(params, state, inputs, targets, tally.steps + 1)
        params, state = out.params, out.optimizer_state
        tally.add(out, len(batch))
    return params, state


@dataclass(frozen=True)
class TrainResult:
    loss: float  # mean cross-entropy over the steps (without loss terms)
    accuracy: float  # fraction of training samples classified right while training
    steps: int


def train_local(
    model: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    batches: Iterator[torch.Tensor],
    spec: OptimizerSpec,
    masks: Tensors | None = None,
    loss_term: LossTerm | None = None,
    augment: Callable[[torch.Tensor], torch.Tensor] | None = None,
) -> TrainResult:
    """Train `model` in place on `x[batch], y[batch]` for each index batch, `masks`' entries fixed.

    The analysis tools' client (one model, no client rule): `local_step` with the anchor
    freeze through `run_steps`; `loss_term` adds to the loss (label smoothing), `augment`
    transforms each batch's inputs.
    """
    model.train()
    params = {n: p.detach().clone() for n, p in model.named_parameters()}
    buffers = {n: b for n, b in model.named_buffers()}
    anchors = {n: params[n].clone() for n in masks or {}}
    masks = {n: m.to(params[n].device) for n, m in (masks or {}).items()}
    after = (lambda p: freeze(p, anchors, masks)) if masks else None
    device = next(iter(params.values())).device

    def load(batch: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        batch = batch.to(x.device)
        inputs, targets = x[batch].to(device), y[batch].to(device)
        return (augment(inputs) if augment is not None else inputs), targets

    def step(p: Tensors, state: Tensors, inputs: torch.Tensor, targets: torch.Tensor, number: int) -> StepOutput:
        return local_step(model, p, buffers, state, inputs, targets, number, spec, loss_term, after_step=after)

    tally = Tally.zeros(device)
    params, _ = run_steps(step, params, optimizer_state(spec, params), batches, load, tally)
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(params[name])
    return TrainResult(tally.mean_loss, tally.accuracy, tally.steps)


@torch.no_grad()
def evaluate(
    model: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    batch_size: int = 256,
    weights: tuple[Tensors, Tensors] | None = None,
) -> tuple[float, float]:
    """(mean cross-entropy, accuracy in [0, 1]) of `model` on the whole of (x, y).

    `weights`: (parameters, buffers) to evaluate instead of the module's own.
    """
    model.eval()
    device = next(model.parameters()).device
    call = model if weights is None else lambda inputs: functional_call(model, weights, (inputs,))
    loss_sum = torch.zeros((), device=device, dtype=torch.float64)
    correct = torch.zeros((), device=device, dtype=torch.int64)
    for start in range(0, len(y), batch_size):
        inputs = x[start : start + batch_size].to(device, non_blocking=True)
        targets = y[start : start + batch_size].to(device, non_blocking=True)
        logits = call(inputs)
        loss_sum += F.cross_entropy(logits, targets, reduction="sum").double()
        correct += (logits.argmax(1) == targets).sum()
    return float(loss_sum) / len(y), int(correct) / len(y)


def pick_device(want_gpu: bool = True) -> torch.device:
    """CUDA when present (and wanted), else the CPU."""
    return torch.device("cuda" if want_gpu and torch.cuda.is_available() else "cpu")


def free_memory(device: str) -> tuple[int, str]:
    """(bytes free, where) on the device a command computes on: the GPU's, else this machine's."""
    if device != "cpu" and torch.cuda.is_available():
        return int(torch.cuda.mem_get_info()[0]), "free on the GPU"
    try:
        with open("/proc/meminfo", encoding="ascii") as fh:
            found = next(line for line in fh if line.startswith("MemAvailable:"))
        return int(found.split()[1]) * 1024, "available on this machine"
    except (OSError, StopIteration, ValueError):
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"), "available on this machine"


@contextmanager
def torch_threads(count: int) -> Iterator[None]:
    """torch's intra-op threads set to `count` for the block (a client's training, whose float sums
    depend on it; the server's element-wise totals, whose bits do not)."""
    before = torch.get_num_threads()
    torch.set_num_threads(max(1, count))
    try:
        yield
    finally:
        torch.set_num_threads(before)
