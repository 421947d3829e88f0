"""Dataset loading: whole splits as normalised in-memory tensors.

Every simulated client trains on a slice of the same training set, so each process
loads a dataset once (see ``load_dataset``) and partitions index ranges of it.

Files are read with small local readers (fedpfn.core.formats: IDX, CIFAR pickle batches
restricted to arrays, SVHN ``.mat``) rather than through ``torchvision.datasets``:
torchvision's CIFAR and SVHN classes insist on the md5 sums of the official files, unpickle
CIFAR without restriction, and go through a per-sample PIL path that would be slow.
torchvision is used only to fetch files when ``download=True``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from fedpfn.core.formats import IDX_IMAGES_MAGIC, IDX_LABELS_MAGIC, DataError, read_idx, read_svhn_mat
from fedpfn.core.formats import read_cifar_batch as _read_cifar_batch  # the name tests reach for
from fedpfn.core.hf_data import PREFIX as HF_PREFIX
from fedpfn.core.hf_data import hf_arrays, hf_problem, is_hf
from fedpfn.core.settings import ConfigError, one_of, setting
from fedpfn.core.user_code import USER_FAULTS, import_user_function, is_code, user_fault

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


@dataclass(frozen=True)
class DataChoice:
    """The dataset an analysis command trains and measures on (lmc, soup, pretrain): one declaration, so
    each takes the same names, says the same help and refuses an unknown one the same way."""

    dataset: str = setting("fmnist", f"one of {', '.join(DATASETS)}", one_of(DATASETS))


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


def dataset_problem(name: str) -> str | None:
    """Why `name` is neither a built-in dataset nor a user's loader (package.module:function), or None."""
    if name in DATASETS or is_code(name) or (is_hf(name) and len(name) > len(HF_PREFIX)):
        return None
    return f"unknown '{name}'; use one of {', '.join(DATASETS)}, hf:NAME, or package.module:function for your own"


def user_dataset(path: str, data_root: str | None) -> DatasetSplits:
    """`--dataset package.module:load`: `load(data_root)` (--data-root, or None) must return
    (train_x, train_y, test_x, test_y), tensors or numpy arrays: x floating point (N, C, H, W), used
    as given (normalise it yourself), y integer (N,) in 0..K-1 (K >= 2 classes, the largest label
    + 1). ConfigError, one line, where it does not."""
    load = import_user_function(path, "dataset", "dataset loader")
    contract = (
        f"dataset: {path}(data_root) must return (train_x, train_y, test_x, test_y): x floating point "
        "(N, C, H, W) with one C x H x W, y integer (N,) in 0..K-1 with K >= 2"
    )
    try:
        splits = load(data_root)
    except USER_FAULTS as err:  # a user's loader may raise anything, SystemExit too
        raise user_fault(err, f"dataset: {path}({data_root!r}) raised {type(err).__name__}: {err}") from None
    return checked_splits(path, splits, contract)


def checked_splits(name: str, splits: object, contract: str) -> DatasetSplits:
    """`splits` (train_x, train_y, test_x, test_y) as the run's dataset, or ConfigError: `contract`, what broke it."""
    if not (isinstance(splits, (tuple, list)) and len(splits) == 4):
        raise ConfigError(f"{contract}; it returned {type(splits).__name__}")
    try:
        train_x, train_y, test_x, test_y = (torch.as_tensor(np.asarray(part)) for part in splits)
    except (TypeError, ValueError, RuntimeError) as err:
        raise ConfigError(f"{contract}; its parts are not arrays ({err})") from None
    for split, x, y in (("train", train_x, train_y), ("test", test_x, test_y)):
        if problem := _user_split_problem(x, y, train_x.shape[1:]):
            raise ConfigError(f"{contract}; its {split} split {problem}")
    num_classes = int(max(train_y.max(), test_y.max())) + 1
    if num_classes < 2 or min(int(train_y.min()), int(test_y.min())) < 0:
        raise ConfigError(f"{contract}; its labels span {int(min(train_y.min(), test_y.min()))}..{num_classes - 1}")
    train_x, test_x = train_x.float().contiguous(), test_x.float().contiguous()
    return DatasetSplits(name, train_x, train_y.long(), test_x, test_y.long(), num_classes)


def _user_split_problem(x: torch.Tensor, y: torch.Tensor, shape: torch.Size) -> str | None:
    if x.ndim != 4 or not x.is_floating_point() or x.shape[1:] != shape or len(x) == 0:
        return f"has x of {x.dtype} {tuple(x.shape)}"
    if y.shape != (len(x),) or y.is_floating_point() or y.dtype == torch.bool:
        return f"has y of {y.dtype} {tuple(y.shape)} for {len(x)} samples"
    if bad := int((~torch.isfinite(x)).sum()):  # trained on, they make every loss NaN without a word
        return f"has {bad} values of x that are NaN or infinite"
    return None


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
    if is_code(name):
        return None  # a user's loader is asked when the data is loaded (user_dataset)
    if is_hf(name):
        return hf_problem(name)
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
    if dataset_problem(name):
        raise DataError(f"unknown dataset {name!r}; choose one of {', '.join(DATASETS)}")


@functools.cache
def _load_cached(name: str, root: str | None, download: bool) -> DatasetSplits:
    if is_code(name):
        return user_dataset(name, root)
    if is_hf(name):  # a Hugging Face dataset through flwr-datasets (fedpfn.core.hf_data)
        return checked_splits(name, hf_arrays(name), f"dataset: {name} must give images and integer labels 0..K-1")
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


# --------------------------------------------------------------------------- readers (fedpfn.core.formats)


def _read_idx_dataset(name: str, root: str | None) -> _Arrays:
    files = _locate(name, root)
    arrays: list[np.ndarray] = []
    for split in ("train", "test"):
        image_path, label_path = files[split]
        images = read_idx(image_path, IDX_IMAGES_MAGIC, 3)
        labels = read_idx(label_path, IDX_LABELS_MAGIC, 1)
        if len(images) != len(labels):
            raise DataError(
                f"{image_path} holds {len(images)} images but {label_path} holds {len(labels)} labels; "
                f"replace the {_TITLES[name]} files with a matching set"
            )
        arrays += [images[:, None, :, :], labels]
    return arrays[0], arrays[1], arrays[2], arrays[3]


def _read_cifar(name: str, root: str | None) -> _Arrays:
    files = _locate(name, root)
    label_key = _CIFAR_LAYOUT[name][3]
    arrays: list[np.ndarray] = []
    for split in ("train", "test"):
        batches = [_read_cifar_batch(path, label_key) for path in files[split]]
        arrays += [np.concatenate([b[0] for b in batches]), np.concatenate([b[1] for b in batches])]
    return arrays[0], arrays[1], arrays[2], arrays[3]


def _read_svhn(name: str, root: str | None) -> _Arrays:
    files = _locate(name, root)
    arrays: list[np.ndarray] = []
    for split in ("train", "test"):
        arrays += list(read_svhn_mat(files[split][0]))
    return arrays[0], arrays[1], arrays[2], arrays[3]


# Every name in DATASETS has a reader here and an entry in each table at the top (tests check it).
_READERS: dict[str, Callable[[str, str | None], _Arrays]] = {
    "fmnist": _read_idx_dataset,
    "mnist": _read_idx_dataset,
    "cifar10": _read_cifar,
    "cifar100": _read_cifar,
    "svhn": _read_svhn,
}
