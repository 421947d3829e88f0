"""Trees of arrays and plain values: walked once, saved as one .npz, read back strictly.

A tree is nested dicts (string keys) and lists whose leaves are numpy arrays or JSON values.
Two parts keep state as trees: the run folder's checkpoint (fedpfn.runtime.runfolder) and a
strategy's state attributes (strategies/state.py), which turns Flower records into tagged
nodes (`{"__arrayrecord__": {...}}`) on the way in and back on the way out. Both walk with
`encode` and `decode`, so what a tree may hold is said here once.

On disk a tree is an uncompressed .npz: its arrays as members `a0`, `a1`, ... and its
skeleton as JSON in `__tree__`, each array replaced by `{"__array__": "a<n>"}`. Reading
never unpickles and checks every array's claimed size against its member before allocating.
"""

from __future__ import annotations

import io
import json
import math
import os
import stat
import zipfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from fedpfn.core.files import DamagedFile, parse_json

ARRAY = "__array__"  # a skeleton's reference to one of the file's arrays
_INDEX = "__tree__"  # the member holding the skeleton
PLAIN = (bool, int, float, str, type(None))

# what reading a damaged or foreign tree file raises (DamagedFile aside)
TREE_ERRORS = (OSError, ValueError, KeyError, TypeError, EOFError, UnicodeDecodeError, zipfile.BadZipFile)


def encode(value: Any, leaf: Callable[[Any], Any]) -> Any:
    """`value` with its dicts of string keys and its lists walked (tuples become lists), and
    every other value replaced by `leaf(value)`, which raises TypeError for one the tree
    cannot hold."""
    if isinstance(value, dict) and all(isinstance(k, str) for k in value):
        return {k: encode(v, leaf) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [encode(v, leaf) for v in value]
    return leaf(value)


def decode(value: Any, tags: Mapping[str, Callable[[Any], Any]]) -> Any:
    """The tree back from `encode`: a one-key dict `{tag: payload}` with a tag of `tags`
    becomes `tags[tag](payload)`; every other dict and list is walked."""
    if isinstance(value, dict):
        if len(value) == 1 and (tag := next(iter(value))) in tags:
            return tags[tag](value[tag])
        return {k: decode(v, tags) for k, v in value.items()}
    if isinstance(value, list):
        return [decode(v, tags) for v in value]
    return value


def tree_bytes(tree: Any) -> bytes:
    """The tree as .npz bytes (arrays uncompressed, the skeleton as JSON)."""
    arrays: dict[str, np.ndarray] = {}

    def stored(value: Any) -> Any:
        if isinstance(value, np.ndarray):
            key = f"a{len(arrays)}"
            arrays[key] = value
            return {ARRAY: key}
        if isinstance(value, PLAIN):
            return value
        if isinstance(value, dict):  # keys other than strings: JSON writes them as strings, as it always has
            return {k: encode(v, stored) for k, v in value.items()}
        raise TypeError(f"a checkpoint holds arrays and plain values only, not {type(value).__name__}")

    skeleton = json.dumps(encode(tree, stored))
    buffer = io.BytesIO()
    np.savez(buffer, **{_INDEX: np.frombuffer(skeleton.encode(), dtype=np.uint8)}, **arrays)
    return buffer.getvalue()


def _npy_header(member: BinaryIO) -> tuple[tuple[int, ...], np.dtype]:
    version = np.lib.format.read_magic(member)
    if version == (1, 0):
        shape, _, dtype = np.lib.format.read_array_header_1_0(member)
    elif version == (2, 0):
        shape, _, dtype = np.lib.format.read_array_header_2_0(member)
    else:
        raise ValueError(f"npy format {version} is not one the tool writes")
    return shape, dtype


def _read_arrays(fh: BinaryIO, only: str | None = None) -> dict[str, np.ndarray]:
    """The arrays of an .npz written by `tree_bytes`, each checked before it is allocated.

    The tool stores members uncompressed, so an array can never claim more bytes than its
    member holds: a crafted header asking for 2^40 elements is refused, not allocated;
    object arrays (pickles) are refused outright.
    """
    arrays = {}
    with zipfile.ZipFile(fh) as archive:
        for info in archive.infolist():
            name = info.filename.removesuffix(".npy")
            if only is not None and name != only:
                continue
            if info.compress_type != zipfile.ZIP_STORED or not info.filename.endswith(".npy"):
                raise ValueError(f"{info.filename} is not an array stored as the tool stores them")
            with archive.open(info) as member:
                shape, dtype = _npy_header(member)
                if dtype.hasobject or math.prod(shape) * dtype.itemsize > info.file_size:
                    raise ValueError(f"{info.filename} claims more data than it holds, or objects")
            with archive.open(info) as member:
                arrays[name] = np.lib.format.read_array(member, allow_pickle=False)
    return arrays


def _open_no_follow(path: Path) -> BinaryIO:
    """A regular file, opened without following a link or waiting on a FIFO."""
    handle = os.fdopen(os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK), "rb")
    if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
        handle.close()
        raise DamagedFile(f"{path} is not a regular file")
    return handle


def _skeleton(raw: np.ndarray, path: Path) -> Any:
    return parse_json(raw.tobytes().decode(), f"{path} (its index)")


def read_tree(path: Path) -> Any:
    """The tree saved by `tree_bytes`; refuses pickles, links and arrays larger than the file."""
    with _open_no_follow(path) as fh:
        arrays = _read_arrays(fh)
    skeleton = _skeleton(arrays.pop(_INDEX), path)
    return decode(skeleton, {ARRAY: arrays.__getitem__})


def read_tree_index(path: Path) -> Any:
    """The tree's plain values alone (arrays left as references): cheap, whatever the model's size."""
    with _open_no_follow(path) as fh:
        return _skeleton(_read_arrays(fh, only=_INDEX)[_INDEX], path)
