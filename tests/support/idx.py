"""Tiny Fashion-MNIST-shaped IDX files, written in each on-disk form the loader reads."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np


def idx_bytes(array: np.ndarray) -> bytes:
    magic = 0x00000800 | array.ndim
    dims = np.asarray(array.shape, dtype=">u4").tobytes()
    return magic.to_bytes(4, "big") + dims + array.astype(np.uint8).tobytes()


def write_idx_set(
    directory: Path, n_train: int = 12, n_test: int = 5, gzip_train: bool = False, seed: int = 0, side: int = 28
) -> dict[str, np.ndarray]:
    """Write the four IDX files of side x side images (train split gzipped if asked); return their contents."""
    rng = np.random.default_rng(seed)
    arrays = {
        "train-images-idx3-ubyte": rng.integers(0, 256, (n_train, side, side), dtype=np.uint8),
        "train-labels-idx1-ubyte": rng.integers(0, 10, n_train, dtype=np.uint8),
        "t10k-images-idx3-ubyte": rng.integers(0, 256, (n_test, side, side), dtype=np.uint8),
        "t10k-labels-idx1-ubyte": rng.integers(0, 10, n_test, dtype=np.uint8),
    }
    directory.mkdir(parents=True, exist_ok=True)
    for stem, array in arrays.items():
        payload = idx_bytes(array)
        if gzip_train and stem.startswith("train"):
            (directory / f"{stem}.gz").write_bytes(gzip.compress(payload))
        else:
            (directory / stem).write_bytes(payload)
    return arrays
