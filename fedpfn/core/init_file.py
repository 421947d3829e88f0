"""A model's start read from a state dict on disk (`--init PATH`): pretrained weights, never code.

A file is read as tensors only: safetensors (`.safetensors`), or `.pt` / `.pth` through
`torch.load(weights_only=True)`, which refuses any pickled object that is not a tensor or a
plain container. Its names and shapes are checked against the model, one line per mismatch,
before anything trains. A classifier whose class count differs (a 1000-class ImageNet head
on a 10-class task) keeps the model's own seeded initialisation, and the notes say so.
A file saved by timm itself (`head.*`, no `net.` prefix) is read through the zoo model's
`file_name` (fedpfn.core.models.TimmViT).
"""

from __future__ import annotations

import pickle
from collections.abc import Callable, Mapping
from pathlib import Path

import torch
from torch import nn

SUFFIXES = (".safetensors", ".pt", ".pth")
MAX_LINES = 20  # mismatch lines shown before the rest are counted


class InitError(ValueError):
    """A start file that cannot be used; one problem per line."""


def init_file_problem(path: str) -> str | None:
    """Why `path` cannot be a start file, found without reading it (a setting's check)."""
    file = Path(path).expanduser()
    if file.suffix not in SUFFIXES:
        return f"'{path}' must end in {', '.join(SUFFIXES)} (a state dict of tensors)"
    if not file.exists():
        return f"'{path}' does not exist"
    if not file.is_file():
        return f"'{path}' is not a regular file"
    return None


def read_state_file(path: str | Path) -> dict[str, torch.Tensor]:
    """The tensors of a start file, on the CPU; InitError with one line if it is not tensors only."""
    file = Path(path).expanduser()
    problem = init_file_problem(str(path))
    if problem:
        raise InitError(problem)
    if file.suffix == ".safetensors":
        from safetensors import SafetensorError
        from safetensors.torch import load_file

        try:
            return load_file(str(file), device="cpu")
        except (SafetensorError, OSError, ValueError) as err:
            raise InitError(f"'{path}' is not a readable safetensors file ({_first_line(err)})") from None
    try:
        loaded = torch.load(file, map_location="cpu", weights_only=True)
    except (
        pickle.UnpicklingError,
        RuntimeError,
        EOFError,
        OSError,
        ValueError,
        TypeError,
        AttributeError,
    ) as err:
        raise InitError(
            f"'{path}' holds more than tensors, or is not a torch file; only a state dict of tensors is read "
            f"(torch.load with weights_only=True: {_first_line(err)})"
        ) from None
    return _tensors_only(loaded, str(path))


def _first_line(err: BaseException) -> str:
    lines = str(err).strip().splitlines()
    return lines[0] if lines else type(err).__name__


def _tensors_only(loaded: object, path: str) -> dict[str, torch.Tensor]:
    """A mapping of names to tensors, or `{"state_dict": ...}` / `{"model": ...}` holding one."""
    if isinstance(loaded, Mapping) and len(loaded) == 1:
        ((key, inner),) = loaded.items()
        if key in ("state_dict", "model") and isinstance(inner, Mapping):
            loaded = inner
    if not isinstance(loaded, Mapping):
        raise InitError(f"'{path}' holds a {type(loaded).__name__}, not a state dict (names -> tensors)")
    others = [str(k) for k, v in loaded.items() if not isinstance(k, str) or not isinstance(v, torch.Tensor)]
    if others:
        raise InitError(f"'{path}' holds entries that are not tensors: {', '.join(others[:5])}")
    return dict(loaded)


def _head_names(model: nn.Module) -> set[str]:
    """State-dict names of the model's `classifier` (the zoo's output layer)."""
    head = getattr(model, "classifier", None)
    if head is None:
        return set()
    prefix = next(name for name, module in model.named_modules() if module is head)
    return {f"{prefix}.{name}" for name in head.state_dict()}


def _own_names(model: nn.Module, state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The file's tensors under the model's names: as they are, or through `file_name` when
    none of them is one of the model's (a file saved by the library the model wraps)."""
    ours = set(model.state_dict())
    rename: Callable[[str], str] | None = getattr(model, "file_name", None)
    if rename is None or ours & set(state):
        return state
    return {rename(name): value for name, value in state.items()}


def _mismatches(
    model: nn.Module, state: dict[str, torch.Tensor], fresh_head: bool
) -> tuple[list[str], set[str]]:
    """(one line per problem, the head's names left to the model's seeded initialisation)."""
    own = model.state_dict()
    heads = _head_names(model)
    problems, reseeded = [], set(heads) if fresh_head else set()
    for name in sorted(set(own) - set(state) - reseeded):
        problems.append(f"missing '{name}' (the model's {tuple(own[name].shape)})")
    for name in sorted(set(state) - set(own)):
        problems.append(f"unexpected '{name}' {tuple(state[name].shape)}: the model has no such tensor")
    for name in sorted(set(state) & set(own) - reseeded):
        theirs, mine = tuple(state[name].shape), tuple(own[name].shape)
        if theirs == mine:
            continue
        if name in heads and theirs[1:] == mine[1:]:  # another class count: a new task's head
            reseeded.add(name)
            continue
        problems.append(f"shape of '{name}': the file's {theirs}, the model's {mine}")
    if reseeded and reseeded != heads:  # a head is taken whole or not at all
        reseeded = set(heads)
    return problems, reseeded


def load_start(model: nn.Module, path: str | Path, fresh_head: bool = False) -> list[str]:
    """Load the start file into `model` in place; returns notes (what was not taken from it).

    The classifier keeps the model's own (seeded) values when the file's class count differs,
    or always with `fresh_head`. Raises InitError listing every mismatch, one line each.
    """
    state = _own_names(model, read_state_file(path))
    problems, reseeded = _mismatches(model, state, fresh_head)
    if problems:
        shown = problems[:MAX_LINES]
        if len(problems) > MAX_LINES:
            shared = len(set(state) & set(model.state_dict()))
            shown.insert(0, f"{len(problems)} mismatches: the file's {len(state)} tensors share {shared} names "
                            "with the model's; is it another architecture or size?")  # fmt: skip
            shown.append(f"... and {len(problems) - MAX_LINES} more mismatches")
        raise InitError("\n".join(f"init: {path}: {line}" for line in shown))
    own = model.state_dict()
    taken = {name: value.to(own[name].dtype) for name, value in state.items() if name not in reseeded}
    model.load_state_dict({**own, **taken})
    if not reseeded:
        return []
    why = "as asked" if fresh_head else "its class count differs from the file's"
    return [
        f"init: {path}: the classifier ({', '.join(sorted(reseeded))}) is initialised from the seed: {why}"
    ]
