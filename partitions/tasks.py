"""Tasks derived from Fashion-MNIST, one per client, each with its own label space: the
contributors of ColD fusion (Don-Yehiya et al. 2023) as clients.

Client k gets task TASK_NAMES[k % 4] and an IID share of the training set, keeping only the
images of its task's classes; its labels are renumbered 0..C_k−1 within the task
(`task_labels`). Each image belongs to one client, so one relabelled label array serves every
client. With per-client heads (`--personal 'classifier.*'`) each contributor's head is its
own and only the body is averaged: configs/cold_fusion.toml.
"""

from __future__ import annotations

import numpy as np

from partitions.dirichlet import PartitionError

# task -> its classes, each a group of Fashion-MNIST labels (0 T-shirt, 1 Trouser, 2 Pullover,
# 3 Dress, 4 Coat, 5 Sandal, 6 Shirt, 7 Sneaker, 8 Bag, 9 Ankle boot)
FMNIST_TASKS: dict[str, tuple[tuple[int, ...], ...]] = {
    "clothing-footwear-bags": ((0, 1, 2, 3, 4, 6), (5, 7, 9), (8,)),
    "upper-vs-lower-body": ((0, 2, 4, 6), (1,)),
    "first-five": ((0,), (1,), (2,), (3,), (4,)),
    "last-five": ((5,), (6,), (7,), (8,), (9,)),
}
TASK_NAMES = tuple(FMNIST_TASKS)
# Tasks no contributor trains on: ColD fusion's held-out evaluation (fedpfn.experiments.cold) fits a
# fresh head on each, on samples drawn by its seed. No contributor's head separates these groups.
HELD_OUT_TASKS: dict[str, tuple[tuple[int, ...], ...]] = {
    "ten-classes": tuple((c,) for c in range(10)),  # every class apart: the head no contributor has
    "tops": ((0,), (2,), (4,), (6,)),  # T-shirt, Pullover, Coat, Shirt: Shirt is in no contributor's tops
}
SOURCE_CLASSES = 10


def task_of(partition_id: int) -> str:
    return TASK_NAMES[partition_id % len(TASK_NAMES)]


def label_map(task: str) -> np.ndarray:
    """Source label -> the task's label (−1: not in the task)."""
    mapping = np.full(SOURCE_CLASSES, -1, dtype=np.int64)
    for new, group in enumerate({**FMNIST_TASKS, **HELD_OUT_TASKS}[task]):
        mapping[list(group)] = new
    return mapping


def restricted_to_tasks(labels: np.ndarray, parts: list[np.ndarray]) -> list[np.ndarray]:
    """Each client's share (an IID one: partitions.simple), restricted to its task's classes."""
    if labels.max() >= SOURCE_CLASSES:
        found = labels.max() + 1
        raise PartitionError(f"tasks are defined over Fashion-MNIST's {SOURCE_CLASSES} labels, found {found}")
    return [part[label_map(task_of(k))[labels[part]] >= 0] for k, part in enumerate(parts)]


def task_labels(labels: np.ndarray, parts: list[np.ndarray]) -> np.ndarray:
    """`labels` with every client's images relabelled in its task (the rest left as they are)."""
    out = np.array(labels, dtype=np.int64, copy=True)
    for k, part in enumerate(parts):
        out[part] = label_map(task_of(k))[labels[part]]
    return out
