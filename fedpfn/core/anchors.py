"""Fixed neuron anchors (TNA-PFN): seeded masks over a model's parameters.

A mask is drawn from a seed, so a server sends one integer and every client rebuilds the
same mask. `True` marks an anchor: an entry that keeps its anchor value bit for bit through
local training, whatever the optimizer does to it (momentum, weight decay, Adam), because
`fedpfn.core.training.freeze` selects the anchor values back after every step. FedPFN and
FedPNU (clients/anchored.py) and the LMC analysis (fedpfn.analysis.fusion) draw their masks here.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from fedpfn.core.arms import MASKS_WORDS, SHARED, masks_word
from fedpfn.core.settings import between, one_of, setting

AnchorMask = dict[str, torch.Tensor]  # parameter name -> bool tensor of its shape

GRANULARITIES = ("weight", "neuron")

_NORM_TYPES = (nn.modules.batchnorm._NormBase, nn.GroupNorm, nn.LayerNorm)
_NEURON_TYPES = (nn.Linear, nn.modules.conv._ConvNd)


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


def _is_bias(module: nn.Module, name: str) -> bool:
    """A bias of a linear, conv or attention layer (`bias`, `in_proj_bias`); a norm layer's shift is its norm's."""
    local = name.rsplit(".", 1)[-1]
    return not isinstance(module, _NORM_TYPES) and (local == "bias" or local.endswith("_bias"))


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
    exclude: Collection[str] = (),
    include_bias: bool = True,
) -> AnchorMask:
    """Draw which entries are anchors; parameters out of scope get no entry.

    `weight`: each entry is an anchor with probability `ratio`. `neuron`: exactly
    round(ratio * n) of the n output neurons of each layer (rows of a Linear, output
    channels of a conv) are, each with its bias entry and the scale and shift of the norm
    layer that follows it. Buffers are never masked, nor the entries named in `exclude` (a
    client's personal ones) nor, with `include_bias` off, the biases of linear, conv and
    attention layers: they are drawn and dropped, so the other entries' masks stay those of a
    mask with them. A classifier or norm layers switched off are not drawn at all, as ever.
    """
    if not 0 <= ratio < 1:
        raise ValueError(f"anchor ratio {ratio} must be in [0, 1)")
    if granularity not in GRANULARITIES:
        raise ValueError(f"anchor granularity '{granularity}' must be weight or neuron")
    gen = torch.Generator().manual_seed(seed)
    skip = set() if include_classifier else _classifier_params(model)
    dropped = set(exclude)
    mask: AnchorMask = {}
    neuron_rows: dict[int, torch.Tensor] = {}  # id(module) -> its neuron mask
    last_rows: torch.Tensor | None = None  # neuron mask of the latest Linear/conv
    for module, name, param in _params_by_module(model):
        is_norm = isinstance(module, _NORM_TYPES)
        if name in skip or (is_norm and not include_norm):
            continue
        if not include_bias and _is_bias(module, name):
            dropped.add(name)
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
    return {name: m for name, m in mask.items() if name not in dropped}


def anchored_fraction(mask: AnchorMask) -> float:
    """Fraction of masked-scope entries that are anchors."""
    total = sum(m.numel() for m in mask.values())
    return sum(int(m.sum()) for m in mask.values()) / max(total, 1)


def as_numpy(mask: AnchorMask) -> dict[str, np.ndarray]:
    return {name: m.numpy() for name, m in mask.items()}


# --- FedPFN / FedPNU's settings and round mask: what its client and server sides share ---------

ANCHOR_SEED = "anchor-seed"  # CONFIG entry, server -> client: the seed of the round's mask
SCHEDULES = ("round", "fixed")
SERVER_STEPS = ("keep", "reset")
MASKS = tuple(MASKS_WORDS.values())  # shared, and client: independent (fedpfn.core.arms)


@dataclass(frozen=True)
class AnchorParams:
    """The settings of FedPFN and FedPNU, shared by their client and server sides."""

    anchor_ratio: float = setting(0.4, "fraction of entries fixed as anchors", between(0, 1, high_open=True))
    anchor_granularity: str | None = setting(
        None, "weight or neuron (default: weight for fedpfn, neuron for fedpnu)", one_of(GRANULARITIES)
    )
    anchor_schedule: str = setting(
        "round", "round: a new mask every round; fixed: one mask, the initial weights, all run", one_of(SCHEDULES)
    )
    anchor_classifier: bool = setting(True, "anchor the classifier layer too")
    anchor_bias: bool = setting(True, "anchor the biases of linear, conv and attention layers too")
    anchor_norm: bool = setting(True, "anchor norm-layer scales and shifts too")
    anchor_server_step: str = setting(
        "keep",
        "round schedule under a server optimizer: keep its own step on anchored entries, "
        "or reset them to their anchor values",
        one_of(SERVER_STEPS),
    )
    anchor_masks: str = setting(
        masks_word(SHARED),
        "shared: every client of a round anchors the same entries (TNA-PFN); client: each its own "
        "(the control: as much freezing, nothing shared; fedpfn only)",
        one_of(MASKS),
    )


def round_mask(model: nn.Module, params: AnchorParams, seed: int, personal: Collection[str] = ()) -> AnchorMask:
    """The anchors of one mask seed: the same on every client and on the server (never a personal entry)."""
    if params.anchor_granularity is None:
        raise ValueError("anchor_granularity is unresolved; build the config with load_config")
    return draw_mask(
        model,
        params.anchor_ratio,
        seed,
        params.anchor_granularity,
        include_classifier=params.anchor_classifier,
        include_norm=params.anchor_norm,
        exclude=personal,
        include_bias=params.anchor_bias,
    )


def anchor_values(params: AnchorParams) -> dict[str, Any]:
    """The settings a run records: anchor_bias only where it is off, so a run reads as before it
    (its config.json, checkpoint fingerprint and default folder name unchanged)."""
    values = dataclasses.asdict(params)
    if params.anchor_bias:
        del values["anchor_bias"]
    return values


# --- the analysis commands' anchor scope and draw (lmc, soup, cold): one declaration for the three ---


@dataclass(frozen=True)
class BodyScope:
    """Whether an analysis command's masks hold the biases and the norm layers; ColD's settings
    inherit it (its contributors' heads are their own, `--personal 'classifier.*'`, never anchored)."""

    anchor_bias: bool = setting(
        True, "anchor the biases of linear, conv and attention layers too (a norm layer's shift is --anchor-norm's)"
    )
    anchor_norm: bool = setting(True, "anchor norm-layer scales and shifts too (BatchNorm, GroupNorm, LayerNorm)")

    def mask_options(self) -> dict[str, bool]:
        """draw_mask's keywords for this scope."""
        return {"include_bias": self.anchor_bias, "include_norm": self.anchor_norm}

    def run_flags(self) -> list[str]:
        """`fedpfn run`'s flags for the biases and norms: only those switched off, so a default run reads as before."""
        return [f"--no-{f.name.replace('_', '-')}" for f in dataclasses.fields(BodyScope) if not getattr(self, f.name)]


@dataclass(frozen=True)
class AnchorScope(BodyScope):
    """Whether the masks of the gate (lmc) and of soups hold the classifier, the biases and the norm layers."""

    anchor_classifier: bool = setting(
        True, "anchor the classifier layer too: a fresh or randomly initialised head is then anchored at its "
        "random values; --no-anchor-classifier leaves it free",
    )  # fmt: skip

    def mask_options(self) -> dict[str, bool]:
        return {"include_classifier": self.anchor_classifier, **super().mask_options()}


@dataclass(frozen=True)
class MaskGranularity:
    """Whether an analysis command's masks anchor single entries or whole neurons: the gate (lmc), soups
    and ColD (there the anchored runs' --anchor-granularity, read off their config.json) take it from here."""

    granularity: str = setting("weight", "anchor granularity: weight or neuron", one_of(GRANULARITIES))


@dataclass(frozen=True)
class MaskDraw(MaskGranularity):
    """One anchor ratio with the granularity: the draw of soups and of ColD (its runs' --anchor-ratio).

    The gate (lmc) takes MaskGranularity alone: it sweeps a comma list of ratios, a setting of another
    type and check (a tuple, none repeated) whose value is the list, not one draw's ratio."""

    anchor_ratio: float = setting(
        0.4, "fraction of entries fixed in the anchored arms", between(0, 1, low_open=True, high_open=True)
    )


SCOPE_PARTS = {"anchor_classifier": "no classifier layer", "anchor_bias": "no biases", "anchor_norm": "no norm layer"}


def scope_unused(model: nn.Module, label: str, given: Collection[str]) -> list[str]:
    """The scope switches given for parameters `model` lacks (`--no-anchor-norm` on the MLP): they would
    change nothing, so they are refused, one line each, as every unused setting is."""
    has = dict.fromkeys(SCOPE_PARTS, False)
    has["anchor_classifier"] = bool(_classifier_params(model))
    for module, name, _ in _params_by_module(model):
        has["anchor_bias"] |= _is_bias(module, name)
        has["anchor_norm"] |= isinstance(module, _NORM_TYPES)
    return [f"{key}: {label} has {what}, so it would change nothing; drop it"
            for key, what in SCOPE_PARTS.items() if key in given and not has[key]]  # fmt: skip


def scope_filled(saved: Mapping[str, Any], cls: type) -> dict[str, Any]:
    """A result's recorded settings with the scope settings of `cls` it lacks at their defaults: a result
    written before the scope settings existed anchored the classifier, biases and norms, as they do."""
    names = {f.name for f in dataclasses.fields(cls)}
    older = {f.name: f.default for f in dataclasses.fields(AnchorScope) if f.name in names}
    return {**older, **saved}
