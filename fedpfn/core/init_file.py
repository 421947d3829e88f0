"""A model's start read from a state dict on disk (a run's `--init`, a soup's or ColD's `--start`):
pretrained weights, never code, and the provenance of every number that follows from them.

A file is read as tensors only: safetensors (`.safetensors`), or torch's zip archive (`.pt` /
`.pth`) through `torch.load(weights_only=True)`, which refuses any pickled object that is not a
tensor or a plain container. What a file may declare is bounded by the model it is for (every
entry as float64, and a margin) before anything is allocated: the file's size, and for torch's
archive its members' unpacked sizes, read from the archive's directory, so a small file that
would inflate to gigabytes is refused unread. Its tensors must be dense, in memory, numeric and
finite, and a floating-point entry of the model takes floating-point values only. Names and shapes
are checked against the model, one line per mismatch, before anything trains. The classifier is
the file's, or the model's own seeded one with `fresh_head`; one of another class count (an
ImageNet head on a 10-class task) without `fresh_head` is refused. A file saved by timm itself
(`head.*`, no `net.` prefix) is read through the zoo model's `file_name` (fedpfn.core.models.TimmViT).

`file_sha256` (read in chunks) is what a run records of its start (`init_sha256` in config.json,
part of the checkpoint's fingerprint) and checks again on resume; soups and ColD record it too.
"""

from __future__ import annotations

import hashlib
import os
import pickle
import re
import stat
import struct
import warnings
import zipfile
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, BinaryIO

import torch
from torch import nn

from fedpfn.core.settings import ConfigError, setting

SUFFIXES = (".safetensors", ".pt", ".pth")
MAX_LINES = 20  # mismatch lines shown before the rest are counted
NAMES_SHOWN = 3  # tensors named in a line about many
MARGIN_BYTES = 16 << 20  # beyond the model's entries as float64: pickled names, a head of more classes
CHUNK_BYTES = 1 << 20  # what hashing reads at a time
ZIP_MAGIC = b"PK\x03\x04"  # torch.save's archive; any other .pt would be unpickled as a legacy file
_LOAD_ERRORS = (
    pickle.UnpicklingError, RuntimeError, EOFError, OSError, ValueError, TypeError, AttributeError,
    KeyError, IndexError, AssertionError, NotImplementedError, struct.error,
)  # fmt: skip
_ZIP_ERRORS = (zipfile.BadZipFile, OSError, ValueError, EOFError, NotImplementedError, struct.error)
INTEGERS = (torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64)  # a buffer's (BatchNorm's count)


class InitError(ConfigError):
    """A start file that cannot be used; one problem per line (a ConfigError: refused, exit 2)."""


def fresh_head_setting(default: bool) -> Any:
    """`fresh_head`, declared alike by every command that takes a start (runs, soups)."""
    return setting(
        default,
        "the classifier starts from the seed, not from the start file (a new task's head); off: the "
        "file's classifier is taken, and one of another class count is refused",
    )


def init_file_problem(path: str) -> str | None:
    """Why `path` cannot be a start file, found without reading it (a setting's check)."""
    if not path.strip():
        return "an empty path; give a start file (.safetensors, or a tensors-only .pt/.pth)"
    file = Path(path).expanduser()
    if file.suffix not in SUFFIXES:
        return f"'{path}' must end in {', '.join(SUFFIXES)} (a state dict of tensors)"
    if not file.exists():
        return f"'{path}' does not exist"
    if not file.is_file():
        return f"'{path}' is not a regular file"
    return None


def sha256_problem(text: str) -> str | None:
    """Why `text` is not a SHA-256 as sha256sum prints it (a setting's check)."""
    if re.fullmatch(r"[0-9a-f]{64}", text):
        return None
    return f"'{text}' is not a sha256 (64 hex digits, lowercase)"


@contextmanager
def _regular(path: str | Path) -> Iterator[BinaryIO]:
    """The file at `path` open for reading; a FIFO or a device is refused before anything is read."""
    try:
        fd = os.open(Path(path).expanduser(), os.O_RDONLY | os.O_NONBLOCK)
    except OSError as err:
        raise InitError(f"'{path}' cannot be read ({err.strerror})") from None
    with os.fdopen(fd, "rb") as fh:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise InitError(f"'{path}' is not a regular file")
        yield fh


def file_sha256(path: str | Path) -> str:
    """The SHA-256 of a file's bytes, read a chunk at a time: a start may be gigabytes."""
    digest = hashlib.sha256()
    with _regular(path) as fh:
        while chunk := fh.read(CHUNK_BYTES):
            digest.update(chunk)
    return digest.hexdigest()


def start_changed(path: str, recorded: str) -> str | None:
    """Why the start at `path` is not the one recorded by its SHA-256, or None (a run's check)."""
    try:
        now = file_sha256(path)
    except InitError as err:
        return f"init: {err}"
    if now == recorded:
        return None
    return (
        f"init: '{path}' changed since its sha256 was recorded: it is {now} now, not {recorded} "
        "(init_sha256); give the file the run started from"
    )


def storage_budget(model: nn.Module) -> int:
    """The most bytes a start file for `model` may declare: its every entry as float64, and a margin."""
    return 8 * sum(value.numel() for value in model.state_dict().values()) + MARGIN_BYTES


def _mib(size: int) -> str:
    return f"{size / 2**20:,.1f} MiB"


def _unpacked_size(fh: BinaryIO, path: str) -> int:
    """What torch's zip archive unpacks to, read from its directory (what torch.load allocates)."""
    if fh.read(len(ZIP_MAGIC)) != ZIP_MAGIC:
        raise InitError(
            f"'{path}' is not a torch file (torch.save's zip archive); only a state dict of tensors is read"
        )
    try:
        return sum(member.file_size for member in zipfile.ZipFile(fh).infolist())
    except _ZIP_ERRORS as err:
        raise InitError(f"'{path}' is not a readable torch zip archive ({_first_line(err)})") from None


def _check_declared(file: Path, path: str, max_bytes: int) -> None:
    """Refuse a file that holds, or would unpack to, more than `max_bytes`; nothing is allocated."""
    with _regular(file) as fh:
        size = os.fstat(fh.fileno()).st_size
        declared = size if file.suffix == ".safetensors" else _unpacked_size(fh, path)
    if max(size, declared) > max_bytes:
        what = f"unpacks to {_mib(declared)} (a {_mib(size)} file)" if declared > size else f"holds {_mib(size)}"
        raise InitError(
            f"'{path}' {what}, more than a start of this model can hold ({_mib(max_bytes)}: its entries as "
            "float64, and a margin); refused unread: is it another architecture?"
        )


def _load(file: Path, path: str) -> object:
    """The file's content, its tensors on the CPU; InitError with one line if it is not tensors only."""
    if file.suffix == ".safetensors":
        from safetensors import SafetensorError
        from safetensors.torch import load_file

        try:
            return load_file(str(file), device="cpu")
        except (SafetensorError, OSError, ValueError, TypeError) as err:
            raise InitError(f"'{path}' is not a readable safetensors file ({_first_line(err)})") from None
    try:
        with warnings.catch_warnings():  # torch's notes on what it is about to refuse
            warnings.simplefilter("ignore")
            return torch.load(file, map_location="cpu", weights_only=True)
    except _LOAD_ERRORS as err:
        raise InitError(
            f"'{path}' holds more than tensors, or is not a torch file; only a state dict of tensors is read "
            f"(torch.load with weights_only=True: {_first_line(err)})"
        ) from None


def read_state_file(path: str | Path, max_bytes: int) -> dict[str, torch.Tensor]:
    """The tensors of a start file, on the CPU, declaring at most `max_bytes` (storage_budget);
    InitError with one line if it is not dense, finite tensors of numbers."""
    problem = init_file_problem(str(path))
    if problem:
        raise InitError(problem)
    file = Path(path).expanduser()
    _check_declared(file, str(path), max_bytes)
    state = _tensors_only(_load(file, str(path)), str(path))
    problem = _tensor_problem(state, max_bytes)
    if problem:
        raise InitError(f"'{path}' {problem}")
    return state


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


def _named(
    names: list[str], state: Mapping[str, torch.Tensor], show: Callable[[torch.Tensor], object] | None = None
) -> str:
    """`'a' (x), 'b' (y), ... and N more`: the first few of many tensors, each with `show`'s word on it."""
    shown = ", ".join(f"'{name}'" + (f" ({show(state[name])})" if show else "") for name in names[:NAMES_SHOWN])
    return shown + (f" and {len(names) - NAMES_SHOWN} more" if len(names) > NAMES_SHOWN else "")


_REFUSED: tuple[tuple[str, Callable[[torch.Tensor], bool], Callable[[torch.Tensor], object]], ...] = (
    ("sparse, nested or of another layout", lambda t: t.layout != torch.strided or t.is_nested,
     lambda t: t.layout),
    ("quantized", lambda t: t.is_quantized, lambda t: t.dtype),
    ("meta tensors or on another device (a start holds values, in memory)", lambda t: t.device.type != "cpu",
     lambda t: t.device),
    ("neither floating point nor integer", lambda t: not t.is_floating_point() and t.dtype not in INTEGERS,
     lambda t: t.dtype),
)  # fmt: skip


def _tensor_problem(state: dict[str, torch.Tensor], max_bytes: int) -> str | None:
    """What makes the tensors no start, in one line: a layout, a dtype, their size, NaN or infinity."""
    for what, refused, show in _REFUSED:
        names = [name for name, value in state.items() if refused(value)]
        if names:
            return f"holds {len(names)} tensor(s) that are {what}: {_named(names, state, show)}"
    size = sum(value.numel() * value.element_size() for value in state.values())
    if size > max_bytes:  # views that repeat a few stored values (stride 0) to any size
        return f"holds tensors of {_mib(size)} in all, more than a start of this model can hold ({_mib(max_bytes)})"
    names = [n for n, v in state.items() if v.is_floating_point() and not bool(torch.isfinite(v).all())]
    if names:
        shown = _named(names, state)
        return f"holds NaN or infinity in {len(names)} tensor(s): {shown}; a start's weights are finite"
    return None


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


def _mismatches(model: nn.Module, state: dict[str, torch.Tensor], fresh_head: bool) -> list[str]:
    """One line per name or shape that does not fit (a classifier of another class count: one line)."""
    own = model.state_dict()
    heads = _head_names(model)
    reseeded = heads if fresh_head else set()
    missing, unexpected = sorted(set(own) - set(state) - reseeded), sorted(set(state) - set(own))
    problems = [f"missing '{name}' (the model's {tuple(own[name].shape)})" for name in missing]
    problems += [f"unexpected '{name}' {tuple(state[name].shape)}: the model has no such tensor" for name in unexpected]
    differ = [name for name in sorted(set(state) & set(own) - reseeded) if state[name].shape != own[name].shape]
    classes = [name for name in differ if name in heads and state[name].shape[1:] == own[name].shape[1:]]
    if classes:
        theirs, mine = state[classes[0]].shape[0], own[classes[0]].shape[0]
        problems.append(f"its classifier has {theirs} classes, the model {mine}: give --fresh-head to start "
                        "the classifier from the seed (a new task's head)")  # fmt: skip
    return problems + [
        f"shape of '{name}': the file's {tuple(state[name].shape)}, the model's {tuple(own[name].shape)}"
        for name in differ if name not in classes
    ]  # fmt: skip


def _shown(problems: list[str], state: dict[str, torch.Tensor], model: nn.Module) -> list[str]:
    """At most MAX_LINES of them; many say how few names the file and the model share."""
    if len(problems) <= MAX_LINES:
        return problems
    shared = len(set(state) & set(model.state_dict()))
    return [
        f"{len(problems)} mismatches: the file's {len(state)} tensors share {shared} names with the model's; "
        "is it another architecture or size?",
        *problems[:MAX_LINES],
        f"... and {len(problems) - MAX_LINES} more mismatches",
    ]


def load_start(model: nn.Module, path: str | Path, fresh_head: bool = False, label: str = "init") -> list[str]:
    """Load the start file into `model` in place; returns notes (what was not taken from it).

    The classifier keeps the model's own (seeded) values with `fresh_head`. Raises InitError
    listing every mismatch, one line each, as `label: path: ...` (label: the setting's name).
    """
    try:
        state = _own_names(model, read_state_file(path, storage_budget(model)))
    except InitError as err:
        raise InitError(f"{label}: {err}") from None
    problems = _mismatches(model, state, fresh_head)
    own = model.state_dict()
    heads = _head_names(model) if fresh_head else set()
    taken = {name: value for name, value in state.items() if name in own and name not in heads}
    if not problems:
        integers = [n for n, v in taken.items() if own[n].is_floating_point() and not v.is_floating_point()]
        if integers:
            problems.append(f"{len(integers)} tensor(s) are not floating point where the model's are: "
                            f"{_named(integers, taken, lambda t: t.dtype)}; a start holds weights")  # fmt: skip
    if problems:
        raise InitError("\n".join(f"{label}: {path}: {line}" for line in _shown(problems, state, model)))
    model.load_state_dict({**own, **{name: value.to(own[name].dtype) for name, value in taken.items()}})
    if not heads:
        return []
    names = ", ".join(sorted(heads))
    return [f"{label}: {path}: the classifier ({names}) starts from the seed, as --fresh-head asks"]
