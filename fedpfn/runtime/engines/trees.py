"""Per-client pytrees (lists and dicts of tensors) stacked, indexed and joined: what the
vmapped program and a round's results are made of."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

from fedpfn.core.training import torch_threads


def stack(trees: Sequence[Any]) -> Any:
    """Per-client pytrees as one pytree of stacked tensors (client first)."""
    first = trees[0]
    if isinstance(first, dict):
        return {key: stack([t[key] for t in trees]) for key in first}
    if isinstance(first, list):
        return [stack([t[i] for t in trees]) for i in range(len(first))]
    return torch.stack(list(trees))


def tree_map(tree: Any, fn: Callable[[torch.Tensor], torch.Tensor]) -> Any:
    """`fn` applied to every tensor of a pytree."""
    if isinstance(tree, dict):
        return {key: tree_map(value, fn) for key, value in tree.items()}
    if isinstance(tree, list):
        return [tree_map(value, fn) for value in tree]
    return fn(tree)


def concatenate(parts: Sequence[Any]) -> Any:
    """Results of consecutive clients (chunks, or parts of a round) as one: tensors concatenated
    along the client dimension, per-client lists joined."""
    first = parts[0]
    if isinstance(first, dict):
        return {key: concatenate([p[key] for p in parts]) for key in first}
    if isinstance(first, list):
        return [item for part in parts for item in part]
    return torch.cat(list(parts))


def interleave(parts: Sequence[Any], shares: Sequence[Sequence[int]]) -> Any:
    """Results of parts of a round as one, in the round's order: part i holds the clients at
    positions `shares[i]` (each in order). Tensors are written once into their rows."""
    first = parts[0]
    if isinstance(first, dict):
        return {key: interleave([p[key] for p in parts], shares) for key in first}
    total = sum(len(share) for share in shares)
    if isinstance(first, list):
        placed: list[Any] = [None] * total
        for part, share in zip(parts, shares):
            for k, item in zip(share, part):
                placed[k] = item
        return placed
    out = first.new_empty((total, *first.shape[1:]))
    with torch_threads(1):  # a copy: one thread gives the same bits, and never waits on a second
        for part, share in zip(parts, shares):
            out.index_copy_(0, torch.tensor(share, dtype=torch.long), part)
    return out
