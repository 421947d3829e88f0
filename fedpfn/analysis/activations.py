"""Activation matching (Ainsworth et al. 2022, "Git Re-Basin", Sec. 3.1): align B's units to A's by
what they compute, not by their weights.

Both models run on the same inputs; for every permutation variable of the spec, the Pearson
correlation of each of A's units with each of B's is measured at the variable's taps (the
module outputs that hold its units, `permspec.Tap`; every spatial position of a conv map is an
observation), summed over the taps, and one linear assignment per variable maximises it. The
variables are independent: B's activations do not depend on how B is permuted, so there is no
descent. A unit that never varies on the inputs correlates 0 with everything.

A permutation is taken only when it beats the identity (ties keep units in place), so a model
matched with itself is left as it is. Models run in eval mode: BatchNorm uses the statistics the
states carry.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator

import torch
from scipy.optimize import linear_sum_assignment
from torch import nn

from fedpfn.analysis.permspec import PermutationSpec, Tap

StateDict = dict[str, torch.Tensor]
Perms = dict[str, torch.Tensor]

BATCH = 256  # inputs per forward pass
EPS = 1e-12  # a unit whose variance is below this is constant on the inputs: it correlates 0


def untapped(spec: PermutationSpec) -> list[str]:
    """Variables with no tap: activation matching cannot see their units."""
    return [v.name for v in spec.variables if not v.taps]


class _Moments:
    """Running sums for the correlation of A's and B's units at one tap, in float64."""

    def __init__(self, width: int, device: torch.device) -> None:
        zeros = lambda *shape: torch.zeros(*shape, dtype=torch.float64, device=device)  # noqa: E731
        self.n = 0
        self.sum_a, self.sum_b, self.sq_a, self.sq_b = (zeros(width) for _ in range(4))
        self.cross = zeros(width, width)

    def add(self, a: torch.Tensor, b: torch.Tensor) -> None:
        self.n += len(a)
        self.sum_a += a.sum(0)
        self.sum_b += b.sum(0)
        self.sq_a += (a * a).sum(0)
        self.sq_b += (b * b).sum(0)
        self.cross += a.T @ b

    def correlation(self) -> torch.Tensor:
        mean_a, mean_b = self.sum_a / self.n, self.sum_b / self.n
        covariance = self.cross / self.n - mean_a[:, None] * mean_b[None, :]
        std_a = (self.sq_a / self.n - mean_a**2).clamp_min(0).sqrt()
        std_b = (self.sq_b / self.n - mean_b**2).clamp_min(0).sqrt()
        live = (std_a[:, None] ** 2 > EPS) & (std_b[None, :] ** 2 > EPS)
        scale = std_a[:, None] * std_b[None, :]
        return torch.where(live, covariance / scale.where(live, torch.ones_like(scale)), torch.zeros_like(scale))


def _units(output: torch.Tensor, positions: tuple[int, ...]) -> torch.Tensor:
    """A tap's units as columns, every sample (and spatial position) a row, in float64."""
    rows = output.detach().movedim(1, -1).reshape(-1, output.shape[1])
    return rows[:, list(positions)].double()


def _hooked(model: nn.Module, modules: set[str], into: dict[str, torch.Tensor]) -> list:
    def keep(name: str):
        return lambda _module, _inputs, output: into.__setitem__(name, output)

    return [model.get_submodule(name).register_forward_hook(keep(name)) for name in sorted(modules)]


def _copy(model: nn.Module, state: StateDict) -> nn.Module:
    twin = copy.deepcopy(model)
    twin.load_state_dict(state)
    return twin.eval()


def _batches(inputs: torch.Tensor, device: torch.device) -> Iterator[torch.Tensor]:
    for start in range(0, len(inputs), BATCH):
        yield inputs[start : start + BATCH].to(device)


@torch.no_grad()
def correlations(
    spec: PermutationSpec, model: nn.Module, state_a: StateDict, state_b: StateDict, inputs: torch.Tensor
) -> dict[str, torch.Tensor]:
    """Per variable, C[i, j] = the correlation of A's unit i with B's unit j, summed over its taps."""
    device = next(model.parameters()).device
    model_a, model_b = _copy(model, state_a), _copy(model, state_b)
    taps: list[tuple[str, Tap]] = [(v.name, tap) for v in spec.variables for tap in v.taps]
    moments = [_Moments(len(tap.positions), device) for _, tap in taps]
    seen_a: dict[str, torch.Tensor] = {}
    seen_b: dict[str, torch.Tensor] = {}
    modules = {tap.module for _, tap in taps}
    hooks = _hooked(model_a, modules, seen_a) + _hooked(model_b, modules, seen_b)
    try:
        for batch in _batches(inputs, device):
            model_a(batch)
            model_b(batch)
            for (_, tap), sums in zip(taps, moments):
                sums.add(_units(seen_a[tap.module], tap.positions), _units(seen_b[tap.module], tap.positions))
    finally:
        for hook in hooks:
            hook.remove()
    summed = {v.name: torch.zeros(v.size, v.size, dtype=torch.float64) for v in spec.variables}
    for (name, _), sums in zip(taps, moments):
        summed[name] += sums.correlation().cpu()
    return summed


def activation_matching(
    spec: PermutationSpec, model: nn.Module, state_a: StateDict, state_b: StateDict, inputs: torch.Tensor
) -> Perms:
    """pi maximising, per variable, the summed correlation of A's units with pi(B)'s on `inputs`.

    ValueError when a variable has no tap or there are no inputs (nothing to correlate).
    """
    if untapped(spec):
        raise ValueError(f"activation matching: no activation tap for {', '.join(untapped(spec))}")
    if len(inputs) < 2:
        raise ValueError(f"activation matching: needs at least 2 held-out inputs, got {len(inputs)}")
    perms = {}
    for name, similarity in correlations(spec, model, state_a, state_b, inputs).items():
        matrix = similarity.numpy()
        rows, cols = linear_sum_assignment(matrix, maximize=True)
        keep = float(matrix.trace())
        found = float(matrix[rows, cols].sum())
        better = found > keep + 1e-9 * max(abs(keep), 1.0)
        perms[name] = torch.as_tensor(cols, dtype=torch.long) if better else torch.arange(len(matrix))
    return perms
