"""Per-client (personal) entries of a model: kept by each client, never sent, never averaged.

A run declares them by name (`personal`: comma-separated fnmatch patterns over the model's
state_dict names, parameters and buffers alike, e.g. `classifier.*`), and a client rule by
layer kind (FedBN: every BatchNorm layer's scale, shift and running statistics). Each
client starts its first round from the global model's values, then keeps its own across
rounds in its state (record PERSONAL, saved like SCAFFOLD's c_i, so it survives a resume);
its replies leave them out (the partial upload FedPNU uses), the anchors never cover them,
and the server keeps the global model's copy as it was (strategies/personal.py). FedPer,
FedRep-style heads, FedBN and ColD fusion's task heads are this one mechanism.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from fnmatch import fnmatchcase

import numpy as np
import torch
from torch import nn

from fedpfn.core.models import build_model

PERSONAL = "personal"  # a client's state record: its own values of the personal entries


def patterns_of(text: str) -> list[str]:
    """`a.*, b.weight` -> ['a.*', 'b.weight']."""
    return [p.strip() for p in text.split(",") if p.strip()]


def personal_entries(
    model: nn.Module, patterns: str, layer_types: Sequence[type[nn.Module]] = ()
) -> frozenset[str]:
    """The state_dict names matching any pattern, and every entry of a layer of `layer_types`."""
    names = list(model.state_dict())
    chosen = {name for name in names for p in patterns_of(patterns) if fnmatchcase(name, p)}
    for module_name, module in model.named_modules():
        if layer_types and isinstance(module, tuple(layer_types)):
            prefix = f"{module_name}." if module_name else ""
            chosen |= {prefix + local for local in module.state_dict()}
    return frozenset(chosen)


def meta_model(model_name: str, dataset: str, projection_head: int) -> nn.Module:
    """The model's layers and names on the meta device, for checks: no memory, no data."""
    shape = (1, 28, 28) if dataset in ("fmnist", "mnist") else (3, 32, 32)
    with torch.device("meta"):
        return build_model(model_name, shape, 10, projection_head)


def unmatched_problem(model_name: str, dataset: str, projection_head: int, patterns: str) -> str | None:
    """Why a pattern of `personal` names nothing of the model (one line), or None."""
    if not patterns_of(patterns):
        return None
    names = list(meta_model(model_name, dataset, projection_head).state_dict())
    unmatched = [p for p in patterns_of(patterns) if not any(fnmatchcase(n, p) for n in names)]
    if not unmatched:
        return None
    tops = sorted({n.split(".")[0] for n in names})
    return (
        f"personal: {', '.join(repr(p) for p in unmatched)} matches no entry of {model_name} "
        f"(its entries start with {', '.join(tops)}; e.g. '{names[-1]}')"
    )


def left_out(names: Collection[str], like: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The partial-upload mask that leaves the personal entries out whole (True everywhere)."""
    return {name: np.ones(np.shape(like[name]), dtype=bool) for name in names if name in like}
