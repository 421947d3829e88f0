"""`--dataset hf:NAME`: a Hugging Face dataset through flwr-datasets' FederatedDataset.

NAME is a dataset on the Hugging Face Hub (`hf:ylecun/mnist`), fetched where the network allows
and cached by `datasets`, or a folder on disk (`hf:/data/my_set`, its `train` and `test` files:
parquet, arrow, csv, ... as `datasets.load_dataset` reads them), which needs no network.
FederatedDataset loads the two splits whole; the run partitions the training split itself, with
any `--partition` (flwr-datasets' own included: `--partition flwr:NAME`). The images become
float32 (N, C, H, W) in [0, 1], standardised per channel with the training split's mean and
standard deviation; the labels are the `label` column (or `labels`, `fine_label`). flwr-datasets
is an optional extra, imported only here.
"""

from __future__ import annotations

import os
import socket
import tempfile
from contextlib import nullcontext
from pathlib import Path
from urllib.parse import urlparse

import numpy as np

from fedpfn.core.formats import DataError

PREFIX = "hf:"
INSTALL = "pip install -e '.[flwr-datasets]'"
LABEL_COLUMNS = ("label", "labels", "fine_label")
IMAGE_COLUMNS = ("image", "img", "pixel_values")


def is_hf(name: str) -> bool:
    return isinstance(name, str) and name.startswith(PREFIX)


def hf_problem(name: str) -> str | None:
    """Cheap pre-flight: flwr-datasets importable, and the Hub reachable for a name that is no folder."""
    try:
        import flwr_datasets  # noqa: F401
    except ImportError:
        return f"dataset: {name} needs flwr-datasets, an optional extra: {INSTALL}"
    source = name[len(PREFIX) :]
    if Path(source).expanduser().is_dir() or os.environ.get("HF_HUB_OFFLINE") == "1":
        return None  # a folder, or datasets' own cache (HF_HUB_OFFLINE=1)
    host = urlparse(os.environ.get("HF_ENDPOINT", "https://huggingface.co")).hostname or "huggingface.co"
    try:
        socket.getaddrinfo(host, 443)
    except OSError as err:
        return (
            f"dataset: {name} is fetched from the Hugging Face Hub, which this machine cannot reach ({host}: "
            f"{err.strerror or err}); give a dataset folder on disk (--dataset hf:/path/to/folder)"
        )
    return None


def hf_arrays(name: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(train_x, train_y, test_x, test_y) of `hf:NAME` through FederatedDataset; DataError, one line."""
    if problem := hf_problem(name):
        raise DataError(problem)
    from datasets.utils import disable_progress_bars
    from flwr_datasets import FederatedDataset
    from flwr_datasets.partitioner import IidPartitioner

    disable_progress_bars()  # the run's own lines say what happens

    source = name[len(PREFIX) :]
    folder = Path(source).expanduser().is_dir()
    source = str(Path(source).expanduser()) if folder else source
    # a folder is the user's data already: datasets' copy of it goes to a folder of this call's, not
    # into the user's Hugging Face cache (where it stayed, even for a dataset then refused)
    with tempfile.TemporaryDirectory(prefix="fedpfn-hf-") if folder else nullcontext() as cache:
        try:
            federated = FederatedDataset(
                dataset=source, partitioners={"train": IidPartitioner(num_partitions=1)}, shuffle=False,
                **({"cache_dir": cache} if folder else {}),
            )  # fmt: skip
            train, test = federated.load_split("train"), federated.load_split("test")
        except Exception as err:  # noqa: BLE001  (datasets raises many kinds: ConnectionError, ValueError, ...)
            first = str(err).strip().splitlines()[0] if str(err).strip() else ""
            raise DataError(f"dataset: {name} could not be loaded ({type(err).__name__}: {first})") from None
        train_x, train_y = _columns(name, train)  # read whole before the copy goes
        test_x, test_y = _columns(name, test)
    mean = train_x.mean(axis=(0, 2, 3), keepdims=True)
    std = train_x.std(axis=(0, 2, 3), keepdims=True) + 1e-8
    return (train_x - mean) / std, train_y, (test_x - mean) / std, test_y


def _columns(name: str, split) -> tuple[np.ndarray, np.ndarray]:
    """A split's images as float32 (N, C, H, W) in [0, 1] and its labels as int64."""
    label = next((c for c in LABEL_COLUMNS if c in split.column_names), None)
    image = next((c for c in IMAGE_COLUMNS if c in split.column_names), None)
    if label is None or image is None:
        raise DataError(
            f"dataset: {name} has columns {', '.join(split.column_names)}; fedpfn reads an image column "
            f"({' or '.join(IMAGE_COLUMNS)}) and a label column ({' or '.join(LABEL_COLUMNS)})"
        )
    x = np.stack([np.asarray(item, dtype=np.float32) for item in split[image]])
    x = x[:, None] if x.ndim == 3 else x.transpose(0, 3, 1, 2)  # (N, H, W) grey, or (N, H, W, C)
    scale = 255.0 if x.max(initial=0.0) > 1.0 else 1.0
    return x / scale, np.asarray(split[label][:], dtype=np.int64)
