"""Weight matching (Ainsworth et al. 2022, "Git Re-Basin", Alg. 1): align B's hidden units to A's.

A permutation pi of a variable maps B's units onto A's: unit i of pi(B) is unit ``pi[i]`` of B.
`weight_matching` maximises the sum over every site of <W_A, pi(W_B)> by coordinate descent:
the variables in a seeded random order, each a linear assignment on the summed inner products
of the parameters it touches (the other variables' current permutations applied), until a full
sweep improves none. The specs (which units, where) are in `fedpfn.analysis.permspec`.

Matching moves BatchNorm running statistics with their channels, but the statistics of an
average of A and pi(B) are not the average of theirs: recompute them before measuring
(`fusion.reset_bn_stats`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from scipy.optimize import linear_sum_assignment

from fedpfn.analysis.permspec import PermutationSpec, Site, permutation_spec

__all__ = [
    "Descent",
    "PermutationSpec",
    "StateDict",
    "apply_permutation",
    "identity_permutation",
    "invert",
    "moved_fraction",
    "permutation_spec",
    "random_permutation",
    "weight_descent",
    "weight_matching",
]

StateDict = dict[str, torch.Tensor]
Perms = dict[str, torch.Tensor]


def identity_permutation(spec: PermutationSpec) -> Perms:
    """Every variable left in place."""
    return {name: torch.arange(size) for name, size in spec.sizes.items()}


def random_permutation(spec: PermutationSpec, generator: torch.Generator) -> Perms:
    """A uniformly random permutation of every variable, drawn from `generator` in spec order."""
    return {name: torch.randperm(size, generator=generator) for name, size in spec.sizes.items()}


def invert(perms: Perms) -> Perms:
    """The inverse of each permutation: apply(invert(p), apply(p, s)) == s."""
    inverse = {}
    for name, perm in perms.items():
        inverse[name] = torch.empty_like(perm)
        inverse[name][perm] = torch.arange(len(perm))
    return inverse


def moved_fraction(perms: Perms) -> float:
    """The fraction of all units (over every variable) that `perms` does not leave in place."""
    total = sum(len(p) for p in perms.values())
    moved = sum(int((p != torch.arange(len(p))).sum()) for p in perms.values())
    return moved / total if total else 0.0


def _check_perms(spec: PermutationSpec, perms: Perms) -> None:
    if set(perms) != set(spec.sizes):
        raise ValueError(f"permutations for {sorted(perms)}, the spec has {sorted(spec.sizes)}")
    for name, size in spec.sizes.items():
        perm = perms[name]
        if perm.shape != (size,) or not torch.equal(perm.sort().values, torch.arange(size)):
            raise ValueError(f"{name}: not a permutation of {size} units")


def _check_states(spec: PermutationSpec, *states: StateDict) -> None:
    for key in spec.by_key:
        for state in states:
            if key not in state:
                raise ValueError(f"the state has no {key!r}, which the permutation spec acts on")
    if len(states) == 2:
        for key, value in states[0].items():
            if key not in states[1] or states[1][key].shape != value.shape:
                raise ValueError(f"the states differ at {key!r} (missing or another shape)")


def _permute_site(tensor: torch.Tensor, site: Site, perm: torch.Tensor) -> torch.Tensor:
    """`tensor` with the site's units reordered: new unit i is old unit perm[i]."""
    if torch.equal(perm, torch.arange(len(perm))):
        return tensor
    index = torch.arange(tensor.shape[site.axis])
    index[site.entries()] = site.entries(perm)
    return tensor.index_select(site.axis, index.to(tensor.device))


def _permuted(
    spec: PermutationSpec, perms: Perms, key: str, tensor: torch.Tensor, skip: str = ""
) -> torch.Tensor:
    """`tensor` (at `key`) under every variable's permutation except `skip`'s."""
    for name, site in spec.by_key.get(key, ()):
        if name != skip:
            tensor = _permute_site(tensor, site, perms[name])
    return tensor


def apply_permutation(spec: PermutationSpec, perms: Perms, state: StateDict) -> StateDict:
    """pi(state): weights, biases and BN scale, shift and running statistics permuted; the rest copied.

    The state may live on any device; the permutations are index tensors on any device too.
    """
    perms = {name: perm.detach().cpu().long() for name, perm in perms.items()}
    _check_perms(spec, perms)
    _check_states(spec, state)
    return {key: _permuted(spec, perms, key, value).clone() for key, value in state.items()}


def _units(tensor: torch.Tensor, site: Site) -> torch.Tensor:
    """The site's units as rows (unit i: its whole slice, its block included), at least float32."""
    rows = tensor.movedim(site.axis, 0)
    if site.positions != tuple(range(len(rows) // site.block)):  # a part of the axis (a ResNet stream)
        rows = rows.index_select(0, site.entries().to(rows.device))
    return rows.reshape(len(site.positions), -1).to(torch.promote_types(rows.dtype, torch.float32))


def _similarity(
    spec: PermutationSpec, name: str, perms: Perms, state_a: StateDict, state_b: StateDict
) -> torch.Tensor:
    """C[i, j] = summed inner products of A's unit i and B's unit j over the variable's weighed sites."""
    variable = next(v for v in spec.variables if v.name == name)
    similarity = torch.zeros(variable.size, variable.size, dtype=torch.float64)
    for site in variable.sites:
        if site.weighs:
            b = _permuted(spec, perms, site.key, state_b[site.key], skip=name)
            similarity += (_units(state_a[site.key], site) @ _units(b, site).T).double().cpu()
    return similarity


@dataclass(frozen=True)
class Descent:
    """What weight matching found, and whether its descent converged (a sweep changed nothing)."""

    perms: Perms
    sweeps: int  # full sweeps over the variables, the last (unchanged) one included
    converged: bool  # False: stopped at max_iter while still improving, a point short of a local optimum


def weight_descent(
    spec: PermutationSpec, state_a: StateDict, state_b: StateDict, max_iter: int = 100, seed: int = 0
) -> Descent:
    """pi maximising sum over sites of <W_A, pi(W_B)> (Git Re-Basin, Alg. 1), from the identity.

    A variable takes a new permutation only when it raises its objective (ties keep the old
    one), so the descent stops: at the first full sweep that changes nothing (converged), or
    after max_iter sweeps (not converged). The inner products are computed where A's tensors
    live (a GPU if so); each assignment on the CPU.
    """
    if max_iter < 1:
        raise ValueError(f"max_iter must be at least 1, got {max_iter}")
    _check_states(spec, state_a, state_b)
    a = {key: value.detach() for key, value in state_a.items()}
    b = {key: state_b[key].detach().to(value.device) for key, value in a.items()}  # B where A is
    perms = identity_permutation(spec)
    names = list(spec.sizes)
    generator = torch.Generator().manual_seed(seed)
    for sweep in range(1, max_iter + 1):
        changed = False
        for position in torch.randperm(len(names), generator=generator).tolist():
            name = names[position]
            similarity = _similarity(spec, name, perms, a, b).numpy()
            rows, cols = linear_sum_assignment(similarity, maximize=True)
            old = float(similarity[rows, perms[name].numpy()].sum())
            new = float(similarity[rows, cols].sum())
            if new > old + 1e-12 * max(abs(old), 1.0):
                perms[name] = torch.as_tensor(cols, dtype=torch.long)
                changed = True
        if not changed:
            return Descent(perms, sweep, True)
    return Descent(perms, max_iter, False)


def weight_matching(
    spec: PermutationSpec, state_a: StateDict, state_b: StateDict, max_iter: int = 100, seed: int = 0
) -> Perms:
    """The permutation of `weight_descent`, without its diagnostics."""
    return weight_descent(spec, state_a, state_b, max_iter, seed).perms
