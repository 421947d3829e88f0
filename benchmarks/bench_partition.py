"""Time this repo's DirichletPartitioner against flwr-datasets' on 60,000 labels.

Run with an interpreter that has flwr-datasets, kept out of the project's venv (nothing else
needs it); from the checkout, any folder name will do:
    python3 -m venv .venv-bench && .venv-bench/bin/pip install flwr-datasets numpy matplotlib
    .venv-bench/bin/python benchmarks/bench_partition.py

What is timed for flwr-datasets: ``DirichletPartitioner._determine_partition_id_to_indices_if_needed()``,
the step the first ``load_partition`` call runs to assign the indices of *all* partitions.
It starts by reading the label column out of the Arrow-backed Dataset with
``np.array(dataset["label"])``, a Python-level pass that dominates its time, so it is timed
twice: as shipped, and with the labels handed over as a ready NumPy array through a small
stand-in for the Dataset (``NumpyLabels``), which isolates the Dirichlet assignment itself.
The per-partition ``Dataset.select`` that ``load_partition`` then does is left out, since
ours returns index arrays only. Both sides use alpha=0.5, min size 10, no self-balancing,
shuffle on and the same seeds; a run that exhausts flwr-datasets' 10 redraws counts as failed.
"""

from __future__ import annotations

import gzip
import statistics
import sys
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from partitions import DirichletPartitioner  # noqa: E402

FASHION_LABELS = Path("/usr/share/datasets/fashion-mnist/train-labels-idx1-ubyte.gz")
CLIENTS = (100, 1000)
ALPHA = 0.5
MIN_SIZE = 10
REPEATS = 5


def load_labels() -> tuple[np.ndarray, str]:
    """Fashion-MNIST training labels when available (IDX: 8-byte header, then uint8), else synthetic."""
    if FASHION_LABELS.exists():
        with gzip.open(FASHION_LABELS, "rb") as f:
            return np.frombuffer(f.read()[8:], dtype=np.uint8).astype(np.int64), "Fashion-MNIST train labels"
    return np.random.default_rng(0).integers(0, 10, size=60_000), "synthetic labels"


def time_ours(labels: np.ndarray, num_clients: int, seed: int) -> float:
    """Seconds for this repo's partitioner to produce every client's index array."""
    start = time.perf_counter()
    DirichletPartitioner(num_clients, ALPHA, seed, min_size=MIN_SIZE).split(labels)
    return time.perf_counter() - start


class NumpyLabels:
    """The three Dataset members flwr-datasets' index assignment reads, served from a NumPy array."""

    def __init__(self, labels: np.ndarray) -> None:
        self.labels = labels
        self.num_rows = len(labels)

    def unique(self, column: str) -> list[int]:
        return np.unique(self.labels).tolist()

    def __getitem__(self, column: str) -> np.ndarray:
        return self.labels


def time_theirs(dataset, partitioner_cls, num_clients: int, seed: int) -> float | None:
    """Seconds for flwr-datasets to assign all partitions' indices, or None if it gave up."""
    partitioner = partitioner_cls(
        num_partitions=num_clients,
        partition_by="label",
        alpha=ALPHA,
        min_partition_size=MIN_SIZE,
        self_balancing=False,
        shuffle=True,
        seed=seed,
    )
    # Set the private slot: the public setter only accepts a real Dataset.
    partitioner._dataset = dataset
    start = time.perf_counter()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # it warns on every redraw
            partitioner._determine_partition_id_to_indices_if_needed()
    except ValueError:
        return None
    return time.perf_counter() - start


def main() -> int:
    try:
        from datasets import Dataset
        from flwr_datasets.partitioner import (
            DirichletPartitioner as FlwrDirichletPartitioner,
        )
    except ImportError:
        print(
            "error: flwr_datasets is not importable; install it in a venv of its own, from the checkout: "
            "python3 -m venv .venv-bench && .venv-bench/bin/pip install flwr-datasets numpy matplotlib; "
            "then run .venv-bench/bin/python benchmarks/bench_partition.py",
            file=sys.stderr,
        )
        return 2

    labels, source = load_labels()
    dataset = Dataset.from_dict({"label": labels})
    print(f"{len(labels)} {source}, {len(np.unique(labels))} classes, alpha={ALPHA}, min size {MIN_SIZE}, "
          f"median of {REPEATS} seeds (0..{REPEATS - 1})")
    time_ours(labels, 10, 0)  # warm-up imports and caches
    headers = ("clients", "ours (s)", "flwr-datasets (s)", "ratio (theirs/ours)", "flwr, numpy labels (s)", "ratio",
               "flwr failed")
    print("  ".join(headers))
    for num_clients in CLIENTS:
        ours = statistics.median(time_ours(labels, num_clients, seed) for seed in range(REPEATS))
        cells = [str(num_clients), f"{ours:.4f}"]
        failed = 0
        for source_data in (dataset, NumpyLabels(labels)):
            runs = [time_theirs(source_data, FlwrDirichletPartitioner, num_clients, seed) for seed in range(REPEATS)]
            done = [t for t in runs if t is not None]
            failed += len(runs) - len(done)
            theirs = statistics.median(done) if done else float("nan")
            cells += [f"{theirs:.4f}", f"{theirs / ours:.1f}"]
        cells.append(f"{failed}/{2 * REPEATS}")
        print("  ".join(cell.rjust(len(header)) for cell, header in zip(cells, headers)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
