"""Permutation specs: which hidden units of each shipped model may be permuted, and where they sit.

A permutation variable is a set of hidden units whose order does not change the model's
function, provided every tensor that reads or writes them is permuted alike. The spec lists,
per variable, its size and its sites: (state-dict key, axis, the positions of its units along
that axis, and a block size where a conv map was flattened into a Linear: unit u then spans
entries ``positions[u] * block ... positions[u] * block + block - 1``).

The input and output layers are not permuted. BatchNorm's scale, shift and running statistics
move with their channels (the statistics are marked ``weighs=False``: they move, but weight
matching does not compare them, as Git Re-Basin compares parameters only).

ResNet-20's residual stream: every block of a stage adds to the same stream, so the stream has
one permutation per stage. Option-A shortcuts zero-pad the channels (``half`` before the old
ones, the rest after), so a stage's stream holds the previous stage's channels at the middle
positions: the variable of the stage-1 stream acts on stage 1's 0..15, stage 2's 8..23 and stage
3's 24..39; the 16 channels added at stage 2 on stage 2's 0..7 and 24..31 and stage 3's 16..23
and 40..47; the 32 added at stage 3 on stage 3's 0..15 and 48..63. Each block's inner channels
(conv1's output) are a variable of their own.

Each variable also lists its taps: the module outputs where the forward pass holds its units
(channel axis 1), for activation matching (`fedpfn.analysis.activations`). Taps are before the
ReLU where there is one (a unit the ReLU silences on every input would correlate with nothing):
a chain's variable at its layer's output, or its BatchNorm's; ResNet-20's inner channels at the
block's bn1; a stream variable at the stem's bn1, and at every block it runs through both at bn2
(the residual branch, before the sum) and at the block's output (after the sum and its ReLU).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import torch
from torch import nn

from fedpfn.core.models import CNN, MLP, VGG11, BasicBlock, ResNet20, WithProjectionHead


@dataclass(frozen=True)
class Site:
    """Where a variable's units sit in one tensor: along `axis`, unit u at `positions[u]` (x block)."""

    key: str
    axis: int
    positions: tuple[int, ...]
    block: int = 1
    weighs: bool = True  # compared by weight matching (parameters); BN running statistics only move

    def entries(self, order: torch.Tensor | None = None) -> torch.Tensor:
        """Indices along `axis` of the units (in `order`, default their own), each expanded to its block."""
        units = torch.tensor(self.positions, dtype=torch.long)
        if order is not None:
            units = units[order]
        return (units[:, None] * self.block + torch.arange(self.block)).reshape(-1)


@dataclass(frozen=True)
class Tap:
    """A module whose output holds a variable's units on its channel axis (1), at `positions`."""

    module: str
    positions: tuple[int, ...]


@dataclass(frozen=True)
class Variable:
    """One permutation variable: `size` units, every site they occupy, and where activations show them."""

    name: str
    size: int
    sites: tuple[Site, ...]
    taps: tuple[Tap, ...] = ()


@dataclass(frozen=True)
class PermutationSpec:
    """The permutation variables of a model, in the order its forward pass meets them."""

    variables: tuple[Variable, ...]
    by_key: dict[str, tuple[tuple[str, Site], ...]] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        by_key: dict[str, list[tuple[str, Site]]] = {}
        for variable in self.variables:
            for site in variable.sites:
                by_key.setdefault(site.key, []).append((variable.name, site))
        object.__setattr__(self, "by_key", {key: tuple(sites) for key, sites in by_key.items()})

    @property
    def sizes(self) -> dict[str, int]:
        return {v.name: v.size for v in self.variables}


Layout = list[tuple[str, tuple[int, ...]]]  # what an activation's units are: (variable, positions) pairs


class _Builder:
    """Collects variables and their sites while a model's layers are walked in forward order."""

    def __init__(self) -> None:
        self.sizes: dict[str, int] = {}
        self.sites: dict[str, list[Site]] = {}
        self.taps: dict[str, list[Tap]] = {}

    def new(self, name: str, size: int) -> None:
        self.sizes[name] = size
        self.sites[name] = []
        self.taps[name] = []

    def tap(self, layout: Layout | None, module: str | None) -> None:
        """`module`'s output holds `layout`'s units (nothing to record without either)."""
        if layout is not None and module is not None:
            for name, positions in layout:
                self.taps[name].append(Tap(module, positions))

    def add(self, layout: Layout, key: str, axis: int, block: int = 1, weighs: bool = True) -> None:
        for name, positions in layout:
            self.sites[name].append(Site(key, axis, positions, block, weighs))

    def spec(self) -> PermutationSpec:
        return PermutationSpec(
            tuple(Variable(n, self.sizes[n], tuple(self.sites[n]), tuple(self.taps[n])) for n in self.sizes)
        )


def _width(layout: Layout) -> int:
    return sum(len(positions) for _, positions in layout)


def _batchnorm(b: _Builder, layout: Layout, name: str) -> None:
    """A BatchNorm's scale and shift (weighed) and running statistics (moved only) follow `layout`."""
    b.add(layout, f"{name}.weight", 0)
    b.add(layout, f"{name}.bias", 0)
    b.add(layout, f"{name}.running_mean", 0, weighs=False)
    b.add(layout, f"{name}.running_var", 0, weighs=False)


def _layer(
    b: _Builder, layout: Layout | None, name: str, module: nn.Linear | nn.Conv2d, block: int
) -> Layout:
    """A Linear or conv reads `layout` on its input axis and writes a new variable of its outputs."""
    if layout is not None:
        b.add(layout, f"{name}.weight", 1, block)
    size = module.out_features if isinstance(module, nn.Linear) else module.out_channels
    b.new(name, size)
    out: Layout = [(name, tuple(range(size)))]
    b.add(out, f"{name}.weight", 0)
    if module.bias is not None:
        b.add(out, f"{name}.bias", 0)
    return out


def _flatten_block(layout: Layout | None, module: nn.Module, flattened: bool) -> int:
    """How many inputs of a Linear each unit of `layout` feeds (h * w after a conv map's Flatten)."""
    if layout is None or not flattened or not isinstance(module, nn.Linear):
        return 1
    width = _width(layout)
    if module.in_features % width:
        raise ValueError(f"a Linear with {module.in_features} inputs after {width} flattened channels")
    return module.in_features // width


def _chain(b: _Builder, layout: Layout | None, modules: Iterable[tuple[str, nn.Module]]) -> Layout | None:
    """Walk a plain chain (Linear, Conv2d, BatchNorm2d, Flatten and parameter-free layers); each
    variable is tapped at its layer's output, or its BatchNorm's (before the ReLU)."""
    flattened, tap = False, None
    for name, module in modules:
        if isinstance(module, nn.Linear | nn.Conv2d):
            b.tap(layout, tap)
            layout = _layer(b, layout, name, module, _flatten_block(layout, module, flattened))
            flattened, tap = False, name
        elif isinstance(module, nn.BatchNorm2d) and layout is not None:
            _batchnorm(b, layout, name)
            tap = name
        elif isinstance(module, nn.Flatten):
            flattened = True
        elif not isinstance(module, nn.ReLU | nn.MaxPool2d):
            raise ValueError(f"permutation_spec: no rule for {type(module).__name__} at {name!r}")
    b.tap(layout, tap)
    return layout


def _children(prefix: str, module: nn.Module) -> list[tuple[str, nn.Module]]:
    return [(f"{prefix}{name}", child) for name, child in module.named_children()]


def _block(b: _Builder, stream: Layout, prefix: str, block: BasicBlock) -> Layout:
    """A basic block: its inner channels are a new variable; its output is the (padded) stream."""
    inner = _layer(b, stream, f"{prefix}conv1", block.conv1, 1)
    _batchnorm(b, inner, f"{prefix}bn1")
    b.tap(inner, f"{prefix}bn1")
    b.add(inner, f"{prefix}conv2.weight", 1)
    if block.extra_planes:
        half = block.extra_planes // 2
        old = _width(stream)
        stream = [(name, tuple(p + half for p in positions)) for name, positions in stream]
        added = (*range(half), *range(half + old, old + block.extra_planes))
        b.new(f"{prefix}shortcut", block.extra_planes)
        stream.append((f"{prefix}shortcut", added))
    if _width(stream) != block.conv2.out_channels:
        raise ValueError(f"{prefix}: a stream of {_width(stream)} channels into {block.conv2.out_channels}")
    b.add(stream, f"{prefix}conv2.weight", 0)
    _batchnorm(b, stream, f"{prefix}bn2")
    b.tap(stream, f"{prefix}bn2")  # the residual branch
    b.tap(stream, prefix.removesuffix("."))  # the block's output: relu(residual + shortcut)
    return stream


def _resnet(b: _Builder, prefix: str, model: ResNet20) -> Layout:
    stream = _layer(b, None, f"{prefix}conv1", model.conv1, 1)
    _batchnorm(b, stream, f"{prefix}bn1")
    b.tap(stream, f"{prefix}bn1")
    for name, block in _children(f"{prefix}layers.", model.layers):
        if type(block) is not BasicBlock:  # a subclass may route its shortcut otherwise
            raise ValueError(f"permutation_spec: no rule for {type(block).__name__} at {name!r}")
        stream = _block(b, stream, f"{name}.", block)
    return stream


def _body(b: _Builder, prefix: str, model: nn.Module) -> Layout | None:
    """The layout of the representation the classifier reads; exact classes only (a subclass may
    change the forward pass the spec is read against)."""
    kind = type(model)
    if kind in (MLP, VGG11):
        return _chain(b, None, _children(f"{prefix}features.", model.features))
    if kind is CNN:
        return _chain(b, None, [*_children(f"{prefix}features.", model.features), (f"{prefix}fc", model.fc)])
    if kind is ResNet20:
        return _resnet(b, prefix, model)
    if kind is WithProjectionHead:
        base = _body(b, f"{prefix}base.", model.base)
        return _chain(b, base, _children(f"{prefix}head.", model.head))
    raise ValueError(
        f"permutation_spec: unsupported model {kind.__name__}; supported: MLP, CNN, VGG11, ResNet20, WithProjectionHead"
    )


def _check_against(spec: PermutationSpec, state: dict[str, torch.Tensor]) -> None:
    """Every (key, axis) a spec touches is covered exactly once: a wrong spec fails here, not later."""
    covered: dict[tuple[str, int], list[torch.Tensor]] = {}
    for key, sites in spec.by_key.items():
        for _, site in sites:
            covered.setdefault((key, site.axis), []).append(site.entries())
    for (key, axis), parts in covered.items():
        entries = torch.cat(parts).sort().values
        length = state[key].shape[axis]
        if not torch.equal(entries, torch.arange(length)):
            raise ValueError(
                f"permutation_spec: the sites on {key} axis {axis} do not cover its {length} entries once"
            )


def permutation_spec(model: nn.Module) -> PermutationSpec:
    """The permutation variables of `model` (one of the zoo's models), read off its modules.

    ValueError naming the class for any other model.
    """
    b = _Builder()
    layout = _body(b, "", model)
    b.add(layout or [], "classifier.weight", 1, _flatten_block(layout, model.classifier, True))
    spec = b.spec()
    _check_against(spec, model.state_dict())
    return spec
