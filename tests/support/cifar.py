"""Tiny CIFAR-10 and CIFAR-100 folders in the python-pickle layout of the official archives."""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np

from fedpfn.core import data


def write_cifar(root: Path, name: str, per_batch: int, seed: int) -> tuple[np.ndarray, list[int], np.ndarray, list[int]]:
    """Tiny CIFAR in the python-pickle layout of the official archives."""
    rng = np.random.default_rng(seed)
    folder, train_files, test_files, label_key = data._CIFAR_LAYOUT[name]
    classes = data._NUM_CLASSES[name]
    directory = root / folder
    directory.mkdir(parents=True)
    contents: dict[str, tuple[np.ndarray, list[int]]] = {}
    for file_name in train_files + test_files:
        images = rng.integers(0, 256, (per_batch, 3072), dtype=np.uint8)
        labels = rng.integers(0, classes, per_batch).tolist()
        entry = {"batch_label": file_name, label_key: labels, "data": images, "filenames": [b"x.png"] * per_batch}
        if name == "cifar100":
            entry["coarse_labels"] = [label // 5 for label in labels]
        with open(directory / file_name, "wb") as f:
            pickle.dump(entry, f)
        contents[file_name] = (images, labels)
    meta_name, meta = ("batches.meta", {"label_names": [f"c{i}" for i in range(10)]})
    if name == "cifar100":
        meta_name, meta = ("meta", {"fine_label_names": [f"f{i}" for i in range(100)], "coarse_label_names": []})
    with open(directory / meta_name, "wb") as f:
        pickle.dump(meta, f)
    train_x = np.concatenate([contents[f][0] for f in train_files])
    test_x = np.concatenate([contents[f][0] for f in test_files])
    train_y = [label for f in train_files for label in contents[f][1]]
    return train_x, train_y, test_x, contents[test_files[0]][1]
