"""Fixed neuron anchors (TNA-PFN): their settings, seeded masks and an exact freeze.

A mask is drawn from a seed, so a server sends one integer and every client rebuilds the
same mask. `True` marks an anchor: an entry that keeps its anchor value bit for bit through
local training, whatever the optimizer does to it (momentum, weight decay, Adam).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from fedpfn.core.settings import between, one_of, setting
from fedpfn.core.training import NoHooks

AnchorMask = dict[str, torch.Tensor]  # parameter name -> bool tensor of its shape

GRANULARITIES = ("weight", "neuron")
SCHEDULES = ("round", "fixed")
SERVER_STEPS = ("keep", "reset")

_NORM_TYPES = (nn.modules.batchnorm._NormBase, nn.GroupNorm, nn.LayerNorm)
_NEURON_TYPES = (nn.Linear, nn.modules.conv._ConvNd)


@dataclass(frozen=True)
class AnchorParams:
    """The settings of FedPFN and FedPNU, shared by their client and server sides."""

    anchor_ratio: float = setting(
        0.4, "fraction of entries fixed as anchors", between(0, 1, high_open=True)
    )
    anchor_granularity: str | None = setting(
        None,
        "weight or neuron (default: weight for fedpfn, neuron for fedpnu)",
        one_of(GRANULARITIES),
    )
    anchor_schedule: str = setting(
        "round", "round: a new mask every round; fixed: one mask, the initial weights, all run",
        one_of(SCHEDULES),
    )
    anchor_classifier: bool = setting(True, "anchor the classifier layer too")
    anchor_norm: bool = setting(True, "anchor norm-layer scales and shifts too")
    anchor_server_step: str = setting(
        "keep",
        "round schedule under a server optimizer: keep its own step on anchored entries, "
        "or reset them to their anchor values",
        one_of(SERVER_STEPS),
    )


def _classifier_params(model: nn.Module) -> set[str]:
    head = getattr(model, "classifier", None)
    if head is None:
        return set()
    prefix = next(name for name, module in model.named_modules() if module is head)
    return {f"{prefix}.{name}" if prefix else name for name, _ in head.named_parameters()}


def _params_by_module(model: nn.Module) -> Iterator[tuple[nn.Module, str, nn.Parameter]]:
    """(owning module, full name, parameter) in registration order, each parameter once."""
    seen: set[int] = set()
    for module_name, module in model.named_modules():
        for local_name, param in module.named_parameters(recurse=False):
            if id(param) in seen or not param.requires_grad:
                continue
            seen.add(id(param))
            yield module, f"{module_name}.{local_name}" if module_name else local_name, param


def _exactly(count: int, ratio: float, gen: torch.Generator) -> torch.Tensor:
    """A bool vector with exactly round(ratio * count) True entries at seeded places."""
    chosen = torch.zeros(count, dtype=torch.bool)
    chosen[torch.randperm(count, generator=gen)[: round(ratio * count)]] = True
    return chosen


def draw_mask(
    model: nn.Module,
    ratio: float,
    seed: int,
    granularity: str = "weight",
    include_classifier: bool = True,
    include_norm: bool = True,
) -> AnchorMask:
    """Draw which entries are anchors; parameters out of scope get no entry.

    `weight`: each entry is an anchor with probability `ratio`. `neuron`: exactly
    round(ratio * n) of the n output neurons of each layer (rows of a Linear, output
    channels of a conv) are, each with its bias entry and the scale and shift of the norm
    layer that follows it. Buffers are never masked.
    """
    if not 0 <= ratio < 1:
        raise ValueError(f"anchor ratio {ratio} must be in [0, 1)")
    if granularity not in GRANULARITIES:
        raise ValueError(f"anchor granularity '{granularity}' must be weight or neuron")
    gen = torch.Generator().manual_seed(seed)
    skip = set() if include_classifier else _classifier_params(model)
    mask: AnchorMask = {}
    neuron_rows: dict[int, torch.Tensor] = {}  # id(module) -> its neuron mask
    last_rows: torch.Tensor | None = None  # neuron mask of the latest Linear/conv
    for module, name, param in _params_by_module(model):
        is_norm = isinstance(module, _NORM_TYPES)
        if name in skip or (is_norm and not include_norm):
            continue
        if granularity == "weight":
            mask[name] = torch.rand(param.shape, generator=gen) < ratio
            continue
        rows = neuron_rows.get(id(module))
        if rows is None:
            tied = is_norm and last_rows is not None and last_rows.numel() == param.shape[0]
            rows = last_rows if tied else _exactly(param.shape[0] if param.dim() else 1, ratio, gen)
            neuron_rows[id(module)] = rows
            if isinstance(module, _NEURON_TYPES):
                last_rows = rows
        row_shape = (-1,) + (1,) * (param.dim() - 1) if param.dim() else ()
        mask[name] = rows.reshape(row_shape).expand(param.shape).clone()
    return mask


def anchored_fraction(mask: AnchorMask) -> float:
    """Fraction of masked-scope entries that are anchors."""
    total = sum(m.numel() for m in mask.values())
    return sum(int(m.sum()) for m in mask.values()) / max(total, 1)


def as_numpy(mask: AnchorMask) -> dict[str, np.ndarray]:
    return {name: m.numpy() for name, m in mask.items()}


_INT_OF_SIZE = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


class AnchorFreeze(NoHooks):
    """Holds anchor values and puts them back after each optimizer step.

    Restoring after the step (not masking gradients) is what makes the freeze exact:
    weight decay and momentum would otherwise still move anchored entries. The restore
    works on the parameters' bits, `(p & keep) | anchor_bits`: no floating-point
    arithmetic, so it is exact for every value (NaN, inf, -0.0 included), and two
    vectorised integer ops cost a quarter of a `torch.where` with a bool mask on the CPU
    (benchmarks/bench_anchors.py). It is also a complete set of `train_local` hooks.
    """

    def __init__(self, model: nn.Module, mask: AnchorMask) -> None:
        params = dict(model.named_parameters())
        self._slots = []
        for name, is_anchor in mask.items():
            if not bool(is_anchor.any()):
                continue
            param = params[name]
            int_type = _INT_OF_SIZE[param.element_size()]
            keep = torch.where(is_anchor, 0, -1).to(device=param.device, dtype=int_type)
            anchor_bits = param.detach().clone().view(int_type) & ~keep
            self._slots.append((param, int_type, keep, anchor_bits))

    @torch.no_grad()
    def restore(self) -> None:
        for param, int_type, keep, anchor_bits in self._slots:
            bits = param.view(int_type)
            bits.bitwise_and_(keep)
            bits.bitwise_or_(anchor_bits)

    def after_step(self, model: nn.Module) -> None:
        self.restore()
