"""Dataset loading: whole splits as normalised in-memory tensors.

Every simulated client trains on a slice of the same training set, so each process
loads a dataset once (see ``load_dataset``) and partitions index ranges of it.

Files are read with small local readers (IDX, CIFAR pickle batches restricted to
arrays, SVHN ``.mat``) rather than through ``torchvision.datasets``: torchvision's CIFAR
and SVHN classes insist on the md5 sums of the official files, unpickle CIFAR without
restriction, and go through a per-sample PIL path that would be slow. torchvision is
used only to fetch files when ``download=True``.
"""

from __future__ import annotations

import functools
import gzip
import math
import pickle
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, NoReturn

import numpy as np
import torch

DATASETS = ("fmnist", "mnist", "cifar10", "cifar100", "svhn")
DEBIAN_FMNIST_DIR = Path("/usr/share/datasets/fashion-mnist")

_NUM_CLASSES = {"fmnist": 10, "mnist": 10, "cifar10": 10, "cifar100": 100, "svhn": 10}
_DIGITS = tuple(str(d) for d in range(10))
# what each label means, for figures (CIFAR-100's hundred are left to their numbers)
CLASS_NAMES: dict[str, tuple[str, ...] | None] = {
    "fmnist": ("T-shirt", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag", "Boot"),
    "mnist": _DIGITS,
    "cifar10": ("plane", "car", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"),
    "cifar100": None,
    "svhn": _DIGITS,
}
_TITLES = {
    "fmnist": "Fashion-MNIST",
    "mnist": "MNIST",
    "cifar10": "CIFAR-10",
    "cifar100": "CIFAR-100",
    "svhn": "SVHN",
}
# Per-channel (mean, std) of the training split, in [0, 1] pixel units.
_STATS: dict[str, tuple[tuple[float, ...], tuple[float, ...]]] = {
    "fmnist": ((0.2860,), (0.3530,)),
    "mnist": ((0.1307,), (0.3081,)),
    "cifar10": ((0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)),
    "cifar100": ((0.5071, 0.4865, 0.4409), (0.2673, 0.2564, 0.2762)),
    "svhn": ((0.4377, 0.4438, 0.4728), (0.1980, 0.2010, 0.1970)),
}

_IDX_IMAGES_MAGIC = 0x00000803  # unsigned bytes, 3 dimensions
_IDX_LABELS_MAGIC = 0x00000801  # unsigned bytes, 1 dimension
_IDX_STEMS = {
    "train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
    "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"),
}
# torchvision's download layout below data_root for the IDX datasets.
_TORCHVISION_IDX_DIRS = {"fmnist": "FashionMNIST/raw", "mnist": "MNIST/raw"}
_CIFAR_LAYOUT = {
    # name: (folder, train files, test files, label key)
    "cifar10": (
        "cifar-10-batches-py",
        tuple(f"data_batch_{i}" for i in range(1, 6)),
        ("test_batch",),
        "labels",
    ),
    "cifar100": ("cifar-100-python", ("train",), ("test",), "fine_labels"),
}
_SVHN_FILES = {"train": "train_32x32.mat", "test": "test_32x32.mat"}

# (train images uint8 N x C x H x W, train labels, test images, test labels)
_Arrays = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]


class DataError(RuntimeError):
    """A dataset is missing or unreadable; the message is one line that says how to fix it."""


@dataclass(frozen=True, eq=False)  # eq=False: comparing tensors field-wise is ambiguous
class DatasetSplits:
    """Both splits of a dataset, normalised, ready to be indexed by partitions."""

    name: str
    train_x: torch.Tensor  # float32, N x C x H x W, normalised per channel
    train_y: torch.Tensor  # int64
    test_x: torch.Tensor
    test_y: torch.Tensor
    num_classes: int

    @property
    def input_shape(self) -> tuple[int, int, int]:
        c, h, w = self.train_x.shape[1:]
        return (int(c), int(h), int(w))


def load_dataset(name: str, data_root: str | None = None, download: bool = False) -> DatasetSplits:
    """Load ``name`` (one of DATASETS); cached per process so each Ray worker reads it once.

    Fashion-MNIST comes from ``data_root`` if given, else from the Debian package's
    directory; every other dataset needs ``data_root``. Raises DataError if the data
    is missing or corrupt.
    """
    _check_name(name)
    root = str(Path(data_root).expanduser().resolve()) if data_root is not None else None
    return _load_cached(name, root, bool(download))


def find_data_problem(name: str, data_root: str | None, download: bool) -> str | None:
    """Cheap pre-flight check (file presence only); returns a one-line problem or None."""
    try:
        _check_name(name)
        if data_root is not None:
            root = Path(data_root).expanduser()
            if root.exists() and not root.is_dir():
                return f"data root {root} is not a directory"
            if not root.exists() and not download:
                return f"data root {root} does not exist; {_how_to_get(name)}"
        try:
            _locate(name, data_root)
        except DataError:
            if not download or data_root is None:
                raise  # nowhere to download to (the Debian directory is not ours to write)
    except DataError as exc:
        return str(exc)
    return None


def _check_name(name: str) -> None:
    if name not in DATASETS:
        raise DataError(f"unknown dataset {name!r}; choose one of {', '.join(DATASETS)}")


@functools.cache
def _load_cached(name: str, root: str | None, download: bool) -> DatasetSplits:
    if download:
        _download_if_missing(name, root)
    train_x, train_y, test_x, test_y = _READERS[name](name, root)
    num_classes = _NUM_CLASSES[name]
    for split, labels in (("train", train_y), ("test", test_y)):
        _check_split(name, root, split, labels, num_classes)
    return DatasetSplits(
        name=name,
        train_x=_normalise(train_x, name),
        train_y=torch.from_numpy(train_y.astype(np.int64)),
        test_x=_normalise(test_x, name),
        test_y=torch.from_numpy(test_y.astype(np.int64)),
        num_classes=num_classes,
    )


def _check_split(name: str, root: str | None, split: str, labels: np.ndarray, num_classes: int) -> None:
    """A split must hold samples (an empty one fails later, as a division by zero) and valid labels."""
    files = ", ".join(str(p) for p in _locate(name, root)[split])
    if labels.size == 0:
        raise DataError(
            f"{_TITLES[name]} {split} split is empty ({files} hold no samples); "
            "replace the files with a set that has at least one sample in each split"
        )
    if labels.min() < 0 or labels.max() >= num_classes:
        raise DataError(
            f"{_TITLES[name]} {split} labels span {labels.min()}..{labels.max()}, "
            f"expected 0..{num_classes - 1}; {files} are corrupt"
        )


def _normalise(images: np.ndarray, name: str) -> torch.Tensor:
    """uint8 N x C x H x W -> float32 scaled to [0, 1], then per-channel standardised."""
    mean, std = _STATS[name]
    x = torch.from_numpy(images.astype(np.float32))  # a fresh, writable copy
    x.div_(255.0)
    x.sub_(torch.tensor(mean).view(1, -1, 1, 1)).div_(torch.tensor(std).view(1, -1, 1, 1))
    return x


# --------------------------------------------------------------------------- locating


def _how_to_get(name: str) -> str:
    if name == "fmnist":
        return (
            "install it with `sudo apt-get install dataset-fashion-mnist`, or pass --data-root DIR "
            "holding the four IDX files (train/t10k-images-idx3-ubyte, train/t10k-labels-idx1-ubyte, "
            ".gz optional), or --data-root DIR --download on a machine that is online"
        )
    return f"pass --data-root DIR holding the {_TITLES[name]} files, or add --download on a machine that is online"


def _require_root(name: str, root: str | None) -> Path:
    if root is None:
        raise DataError(f"no --data-root given for {_TITLES[name]}; {_how_to_get(name)}")
    return Path(root)


def _locate(name: str, root: str | None) -> dict[str, list[Path]]:
    """Paths of the files each split needs, or DataError naming what is missing and the fixes."""
    if name in _TORCHVISION_IDX_DIRS:
        return _locate_idx(name, root)
    base = _require_root(name, root)
    if name in _CIFAR_LAYOUT:
        folder, train_files, test_files, _ = _CIFAR_LAYOUT[name]
        files = {"train": [base / folder / f for f in train_files], "test": [base / folder / f for f in test_files]}
    else:
        files = {split: [base / f] for split, f in _SVHN_FILES.items()}
    missing = [p for paths in files.values() for p in paths if not p.is_file()]
    if missing:
        raise DataError(f"{_TITLES[name]} not found: {missing[0]} is missing; {_how_to_get(name)}")
    return files


def _locate_idx(name: str, root: str | None) -> dict[str, list[Path]]:
    """First directory holding all four IDX files (each raw or ``.gz``)."""
    if root is None:
        if name != "fmnist":
            _require_root(name, root)
        candidates = [DEBIAN_FMNIST_DIR]
    else:
        candidates = [Path(root), Path(root) / _TORCHVISION_IDX_DIRS[name]]
    for directory in candidates:
        found: dict[str, list[Path]] = {}
        for split, stems in _IDX_STEMS.items():
            paths = [_idx_file(directory, stem) for stem in stems]
            if None in paths:
                break
            found[split] = [p for p in paths if p is not None]
        else:
            return found
    where = " or ".join(str(d) for d in candidates)
    raise DataError(f"{_TITLES[name]} IDX files not found in {where}; {_how_to_get(name)}")


def _idx_file(directory: Path, stem: str) -> Path | None:
    for candidate in (directory / stem, directory / f"{stem}.gz"):
        if candidate.is_file():
            return candidate
    return None


def _download_if_missing(name: str, root: str | None) -> None:
    """Fetch through torchvision only when our own check finds files missing."""
    try:
        _locate(name, root)
        return
    except DataError:
        pass
    base = _require_root(name, root)
    import torchvision.datasets as tvd  # slow import; only needed for downloads

    fetchers: dict[str, Callable[[], object]] = {
        "fmnist": lambda: tvd.FashionMNIST(base, train=True, download=True),
        "mnist": lambda: tvd.MNIST(base, train=True, download=True),
        "cifar10": lambda: tvd.CIFAR10(base, train=True, download=True),
        "cifar100": lambda: tvd.CIFAR100(base, train=True, download=True),
        "svhn": lambda: (tvd.SVHN(base, split="train", download=True), tvd.SVHN(base, split="test", download=True)),
    }
    try:
        fetchers[name]()  # (F)MNIST and CIFAR fetch both splits in one go
    except (OSError, RuntimeError, ValueError) as exc:  # URLError is an OSError
        first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise DataError(
            f"downloading {_TITLES[name]} into {base} failed ({first_line}); "
            f"check the connection, or pass --data-root DIR holding the files"
        ) from exc


# --------------------------------------------------------------------------- readers


def _read_idx_dataset(name: str, root: str | None) -> _Arrays:
    files = _locate(name, root)
    arrays: list[np.ndarray] = []
    for split in ("train", "test"):
        image_path, label_path = files[split]
        images = _read_idx(image_path, _IDX_IMAGES_MAGIC, 3)
        labels = _read_idx(label_path, _IDX_LABELS_MAGIC, 1)
        if len(images) != len(labels):
            raise DataError(
                f"{image_path} holds {len(images)} images but {label_path} holds {len(labels)} labels; "
                f"replace the {_TITLES[name]} files with a matching set"
            )
        arrays += [images[:, None, :, :], labels]
    return arrays[0], arrays[1], arrays[2], arrays[3]


MAX_IDX_BYTES = 1 << 32  # 4 GiB: 90 times the largest official IDX file (the training images, 47 MB)


def _read_idx(path: Path, magic: int, ndim: int) -> np.ndarray:
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


def _read_cifar(name: str, root: str | None) -> _Arrays:
    files = _locate(name, root)
    label_key = _CIFAR_LAYOUT[name][3]
    arrays: list[np.ndarray] = []
    for split in ("train", "test"):
        batches = [_read_cifar_batch(path, label_key) for path in files[split]]
        arrays += [np.concatenate([b[0] for b in batches]), np.concatenate([b[1] for b in batches])]
    return arrays[0], arrays[1], arrays[2], arrays[3]


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


def _read_cifar_batch(path: Path, label_key: str) -> tuple[np.ndarray, np.ndarray]:
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


def _read_svhn(name: str, root: str | None) -> _Arrays:
    files = _locate(name, root)
    arrays: list[np.ndarray] = []
    for split in ("train", "test"):
        arrays += list(_read_svhn_mat(files[split][0]))
    return arrays[0], arrays[1], arrays[2], arrays[3]


def _read_svhn_mat(path: Path) -> tuple[np.ndarray, np.ndarray]:
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


# Every name in DATASETS has a reader here and an entry in each table at the top (tests check it).
_READERS: dict[str, Callable[[str, str | None], _Arrays]] = {
    "fmnist": _read_idx_dataset,
    "mnist": _read_idx_dataset,
    "cifar10": _read_cifar,
    "cifar100": _read_cifar,
    "svhn": _read_svhn,
}
