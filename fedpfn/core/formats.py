"""The on-disk formats of the datasets, read by small local readers that trust no file.

IDX (MNIST, Fashion-MNIST; gzip or raw), CIFAR's python batches (pickles, unpickled with
only the names numpy needs and no array larger than the file) and SVHN's ``.mat``. Each
reader takes one file and returns uint8 arrays, or raises DataError in one line that says
what is wrong and how to fix it. Which files a dataset has is fedpfn.core.data's business.
"""

from __future__ import annotations

import gzip
import math
import pickle
import zlib
from pathlib import Path
from typing import BinaryIO, NoReturn

import numpy as np


class DataError(RuntimeError):
    """A dataset is missing or unreadable; the message is one line that says how to fix it."""


IDX_IMAGES_MAGIC = 0x00000803  # unsigned bytes, 3 dimensions
IDX_LABELS_MAGIC = 0x00000801  # unsigned bytes, 1 dimension

MAX_IDX_BYTES = 1 << 32  # 4 GiB: 90 times the largest official IDX file (the training images, 47 MB)


def read_idx(path: Path, magic: int, ndim: int) -> np.ndarray:
    """Read an unsigned-byte IDX file (gzip detected from its content), validating the header.

    The header says how many bytes follow; only that many are ever read or decompressed
    (plus one, to notice extra data), so a gzip bomb or a header asking for absurd dims
    is refused before any large buffer is made.
    """
    try:
        with path.open("rb") as raw:
            gzipped = raw.read(2) == b"\x1f\x8b"
        with gzip.open(path, "rb") if gzipped else path.open("rb") as f:
            dims = _idx_header(path, f, magic, ndim)
            payload = _idx_payload(path, f, dims, None if gzipped else path.stat().st_size - f.tell())
    except EOFError as exc:
        raise DataError(f"{path}: truncated gzip data ({exc}); re-download or replace the file") from exc
    except (OSError, zlib.error) as exc:  # gzip.BadGzipFile is an OSError
        raise DataError(f"{path}: cannot read ({exc}); re-download or replace the file") from exc
    return np.frombuffer(payload, dtype=np.uint8).reshape(dims)


def _idx_payload(path: Path, f: BinaryIO, dims: tuple[int, ...], size: int | None) -> bytes:
    """The bytes after the header, exactly as many as `dims` need; `size`: what follows (None: gzip)."""
    expected = math.prod(dims)  # exact: np.prod wraps around at 2**63 and could match any payload
    shape = " x ".join(map(str, dims))
    if size is None and expected > MAX_IDX_BYTES:
        raise DataError(
            f"{path}: the header dims {shape} ask for {expected} bytes, more than any dataset here "
            f"({MAX_IDX_BYTES}); the file is corrupt"
        )
    payload = f.read(expected + 1) if size is None or size == expected else b""
    if len(payload) != expected:
        found = size if size is not None else f"more than {expected}" if len(payload) > expected else len(payload)
        raise DataError(
            f"{path}: payload is {found} bytes but the header dims {shape} need {expected}; "
            "the file is truncated or corrupt"
        )
    return payload


def _idx_header(path: Path, f: BinaryIO, magic: int, ndim: int) -> tuple[int, ...]:
    """The dims of an IDX file whose magic number is `magic`, read from its first bytes."""
    header = f.read(4 + 4 * ndim)
    if len(header) < 4 + 4 * ndim:
        raise DataError(f"{path}: only {len(header)} bytes, too short for an IDX header; the file is truncated")
    found_magic = int.from_bytes(header[:4], "big")
    if found_magic != magic:
        raise DataError(
            f"{path}: IDX magic number 0x{found_magic:08x}, expected 0x{magic:08x}; wrong or corrupt file"
        )
    return tuple(int(d) for d in np.frombuffer(header, dtype=">u4", count=ndim, offset=4))


MAX_CIFAR_BATCH_BYTES = 1 << 30  # 1 GiB: the largest official batch (CIFAR-100's train) is 155 MB


class _DirectArray(np.ndarray):
    """`numpy.ndarray` as a CIFAR batch may name it: the type `_reconstruct` fills from the file's
    bytes. Called directly it would allocate whatever shape the file asks for, so it refuses."""

    def __new__(cls, *args: object, **kwargs: object) -> NoReturn:
        raise pickle.UnpicklingError("it calls numpy.ndarray directly, which a CIFAR batch never does")


class _ArrayOnlyUnpickler(pickle.Unpickler):
    """Unpickles plain containers and numpy arrays, and refuses every other global.

    CIFAR's python batches are pickles, and a file a user downloaded or was sent could
    name any callable (``os.system``) for ``pickle.load`` to run; torchvision's loader
    trusts them. Only the names numpy uses to rebuild an array (Python 2's protocol 2 of
    the official files and the protocols numpy 1 and 2 write today) are resolved, and no
    array may be made larger than the file (`budget` bytes): a 60-byte file asking for
    2^40 elements is refused before anything is allocated (numpy fills the others from
    the file's own bytes, which it checks against their shape).
    """

    _ALLOWED = frozenset(
        {
            ("numpy", "dtype"),
            ("numpy.core.numeric", "_frombuffer"),
            ("numpy._core.numeric", "_frombuffer"),
            ("_codecs", "encode"),  # bytes in protocol 2 written by Python 3
        }
    )
    _RECONSTRUCT = frozenset({("numpy.core.multiarray", "_reconstruct"), ("numpy._core.multiarray", "_reconstruct")})

    def __init__(self, file: BinaryIO, budget: int) -> None:
        super().__init__(file, encoding="latin1")
        self.budget = budget

    def find_class(self, module: str, name: str) -> object:
        if (module, name) == ("numpy", "ndarray"):
            return _DirectArray
        if (module, name) in self._RECONSTRUCT:
            return self._reconstruct
        if (module, name) not in self._ALLOWED:
            raise pickle.UnpicklingError(f"it names {module}.{name}, which a CIFAR batch never holds")
        return super().find_class(module, name)

    def _reconstruct(self, subtype: type, shape: object, dtype: object) -> np.ndarray:
        count = math.prod(shape) if isinstance(shape, tuple) and all(isinstance(d, int) for d in shape) else -1
        if subtype is not _DirectArray or not 0 <= count <= self.budget:
            raise pickle.UnpicklingError(f"it asks for an array of shape {shape!r}, larger than the file")
        return np.ndarray.__new__(np.ndarray, shape, np.dtype(dtype))


def read_cifar_batch(path: Path, label_key: str) -> tuple[np.ndarray, np.ndarray]:
    """One CIFAR python batch: a pickled dict with ``data`` (N x 3072 uint8, CHW rows) and labels."""
    try:
        size = path.stat().st_size
        if size > MAX_CIFAR_BATCH_BYTES:
            raise ValueError(f"{size} bytes, more than any CIFAR batch ({MAX_CIFAR_BATCH_BYTES})")
        with path.open("rb") as f:
            entry = _ArrayOnlyUnpickler(f, budget=size).load()
        data, labels = entry["data"], entry[label_key]
        # before numpy copies them: a list referenced 50,000 times costs the file a few bytes each
        if not isinstance(data, np.ndarray):
            raise TypeError(f"'data' is a {type(data).__name__}, not an array")
        if isinstance(labels, np.ndarray):
            whole = labels.dtype.kind in "iu"
        else:
            whole = isinstance(labels, list) and all(type(label) is int for label in labels)
        if not whole:
            raise TypeError(f"'{label_key}' is not a list of whole numbers")
        labels = np.asarray(labels, dtype=np.int64)
    except (OSError, EOFError, pickle.UnpicklingError, KeyError, TypeError, ValueError, IndexError) as exc:
        raise DataError(
            f"{path}: not a readable CIFAR batch ({type(exc).__name__}: {exc}); re-download or replace the file"
        ) from exc
    if data.dtype != np.uint8 or data.ndim != 2 or data.shape[1] != 3072:
        raise DataError(f"{path}: 'data' should be an N x 3072 uint8 array, got {data.shape}; the file is corrupt")
    if labels.shape != (len(data),):
        raise DataError(f"{path}: {len(data)} images but {labels.size} labels; the file is corrupt")
    return data.reshape(-1, 3, 32, 32), labels


def read_svhn_mat(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """SVHN cropped-digit file: X is 32 x 32 x 3 x N uint8, y is N x 1 with 10 for the digit 0."""
    try:
        import scipy.io
    except ImportError as exc:
        raise DataError("reading SVHN needs scipy; run `pip install scipy`") from exc
    try:
        mat = scipy.io.loadmat(path)
        x, y = mat["X"], mat["y"]
    except (OSError, ValueError, KeyError, TypeError, scipy.io.matlab.MatReadError) as exc:
        raise DataError(
            f"{path}: not a readable SVHN .mat file ({type(exc).__name__}: {exc}); re-download or replace it"
        ) from exc
    if x.dtype != np.uint8 or x.ndim != 4 or x.shape[:3] != (32, 32, 3):
        raise DataError(f"{path}: X should be a 32 x 32 x 3 x N uint8 array, got {x.shape}; the file is corrupt")
    labels = y.astype(np.int64).reshape(-1)
    if labels.size != x.shape[3]:
        raise DataError(f"{path}: {x.shape[3]} images but {labels.size} labels; the file is corrupt")
    labels[labels == 10] = 0
    return np.ascontiguousarray(x.transpose(3, 2, 0, 1)), labels
