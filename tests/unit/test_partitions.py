"""Tests for the top-level ``partitions`` package (synthetic labels, no dataset files)."""

from __future__ import annotations

import json
import time

import numpy as np
import pytest

from partitions import (
    PARTITION_METHODS,
    DirichletPartitioner,
    PartitionError,
    iid_partition,
    label_counts,
    partition_labels,
    shard_partition,
)
from partitions.report import plot_partition, write_partition_json

NUM_CLASSES = 10


@pytest.fixture(scope="module")
def labels() -> np.ndarray:
    return np.random.default_rng(1234).integers(0, NUM_CLASSES, size=60_000)


def assert_disjoint_complete(parts: list[np.ndarray], n: int) -> None:
    for p in parts:
        assert p.dtype == np.int64
        assert np.all(np.diff(p) > 0), "each part must be sorted and duplicate-free"
    merged = np.concatenate(parts)
    assert merged.size == n
    assert np.array_equal(np.sort(merged), np.arange(n))


def max_class_fraction(counts: np.ndarray) -> float:
    """Mean over clients of the share of its largest class: 1/num_classes is IID, 1.0 is one class per client."""
    return float(np.mean(counts.max(axis=1) / counts.sum(axis=1)))


@pytest.mark.parametrize("method", PARTITION_METHODS)
@pytest.mark.parametrize("num_clients", [1, 10, 1000])
def test_disjoint_and_complete(labels: np.ndarray, method: str, num_clients: int) -> None:
    parts = partition_labels(labels, num_clients, method, seed=3)
    assert len(parts) == num_clients
    if method == "tasks":  # each client's IID share, only its task's classes (partitions/tasks.py)
        shares = iid_partition(labels, num_clients, seed=3)
        assert all(np.isin(p, s).all() and np.all(np.diff(p) > 0) for p, s in zip(parts, shares))
        assert num_clients == 1 or sum(map(len, parts)) < labels.size
        return
    assert_disjoint_complete(parts, labels.size)


def test_non_integer_labels_are_partitioned(labels: np.ndarray) -> None:
    names = np.array(list("abcdefghij"))[labels]
    parts = DirichletPartitioner(20, 0.5, seed=0).split(names)
    assert_disjoint_complete(parts, labels.size)


@pytest.mark.parametrize("num_clients,alpha,min_size", [(100, 0.5, 10), (1000, 0.5, 10), (20, 0.1, 200), (50, 0.3, 200)])
def test_min_size_met(labels: np.ndarray, num_clients: int, alpha: float, min_size: int) -> None:
    parts = DirichletPartitioner(num_clients, alpha, seed=0, min_size=min_size).split(labels)
    assert min(len(p) for p in parts) >= min_size


def test_impossible_min_size_fails_fast_with_advice(labels: np.ndarray) -> None:
    start = time.perf_counter()
    with pytest.raises(PartitionError) as err:
        DirichletPartitioner(100, 0.01, seed=0, min_size=500).split(labels)
    assert time.perf_counter() - start < 2.0
    msg = str(err.value)
    assert "\n" not in msg
    for needle in ("num_clients=100", "alpha=0.01", "min_size=500", "100 attempts", "fewer clients", "larger alpha"):
        assert needle in msg


def test_max_attempts_bounds_redraws(labels: np.ndarray) -> None:
    with pytest.raises(PartitionError, match="in 3 attempts"):
        DirichletPartitioner(100, 0.01, seed=0, min_size=500, max_attempts=3).split(labels)


def test_dirichlet_is_fast(labels: np.ndarray) -> None:
    partitioner = DirichletPartitioner(1000, 0.5, seed=0)
    partitioner.split(labels)  # warm-up
    start = time.perf_counter()
    partitioner.split(labels)
    assert time.perf_counter() - start < 0.5


@pytest.mark.parametrize("method", PARTITION_METHODS)
def test_reproducible_by_seed(labels: np.ndarray, method: str) -> None:
    a = partition_labels(labels, 50, method, seed=7)
    b = partition_labels(labels, 50, method, seed=7)
    c = partition_labels(labels, 50, method, seed=8)
    assert all(np.array_equal(x, y) for x, y in zip(a, b))
    assert not all(np.array_equal(x, z) for x, z in zip(a, c))


def test_same_partitioner_splits_identically(labels: np.ndarray) -> None:
    partitioner = DirichletPartitioner(30, 0.3, seed=5)
    first, second = partitioner.split(labels), partitioner.split(labels)
    assert all(np.array_equal(x, y) for x, y in zip(first, second))


def test_small_alpha_is_more_skewed(labels: np.ndarray) -> None:
    skew = {
        alpha: max_class_fraction(
            label_counts(labels, partition_labels(labels, 100, "dirichlet", alpha=alpha, min_size=1), NUM_CLASSES)
        )
        for alpha in (0.05, 0.5, 100.0)
    }
    assert skew[0.05] > skew[0.5] > skew[100.0]
    assert skew[0.05] > 0.6
    assert skew[100.0] < 0.2


def test_iid_is_balanced(labels: np.ndarray) -> None:
    parts = iid_partition(labels, 7, seed=0)
    sizes = [len(p) for p in parts]
    assert max(sizes) - min(sizes) <= 1
    assert max_class_fraction(label_counts(labels, parts, NUM_CLASSES)) < 0.15


@pytest.mark.parametrize("shards_per_client", [1, 2, 3])
def test_shards_limit_classes_per_client(labels: np.ndarray, shards_per_client: int) -> None:
    parts = shard_partition(labels, 100, shards_per_client, seed=0)
    assert_disjoint_complete(parts, labels.size)
    classes_per_client = (label_counts(labels, parts, NUM_CLASSES) > 0).sum(axis=1)
    # A shard straddling a class boundary adds at most one class.
    assert classes_per_client.max() <= 2 * shards_per_client
    assert classes_per_client.mean() <= shards_per_client + 0.5
    sizes = [len(p) for p in parts]
    assert max(sizes) - min(sizes) <= shards_per_client


def test_label_counts(labels: np.ndarray) -> None:
    parts = partition_labels(labels, 40, "dirichlet", alpha=0.3, seed=1)
    counts = label_counts(labels, parts, NUM_CLASSES)
    assert counts.shape == (40, NUM_CLASSES)
    assert counts.dtype == np.int64
    assert np.array_equal(counts.sum(axis=1), [len(p) for p in parts])
    assert np.array_equal(counts.sum(axis=0), np.bincount(labels, minlength=NUM_CLASSES))
    assert np.array_equal(counts[3], np.bincount(labels[parts[3]], minlength=NUM_CLASSES))


def test_write_partition_json_round_trips(tmp_path, labels: np.ndarray) -> None:
    counts = label_counts(labels, partition_labels(labels, 12, "shards", seed=0), NUM_CLASSES)
    path = tmp_path / "out" / "partition.json"
    write_partition_json(path, counts)
    doc = json.loads(path.read_text())
    assert [c["id"] for c in doc["clients"]] == list(range(12))
    assert np.array_equal(np.array([c["label_counts"] for c in doc["clients"]]), counts)


@pytest.mark.parametrize("num_clients,num_classes", [(10, 10), (1000, 10), (30, 100)])
def test_plot_partition_writes_png(tmp_path, num_clients: int, num_classes: int) -> None:
    rng = np.random.default_rng(0)
    counts = rng.integers(0, 50, size=(num_clients, num_classes))
    path = tmp_path / "partition.png"
    plot_partition(path, counts)
    data = path.read_bytes()
    assert data.startswith(b"\x89PNG") and len(data) > 1000


@pytest.mark.parametrize(
    "call,needle",
    [
        (lambda y: DirichletPartitioner(10, 0.0, seed=0), "alpha=0.0"),
        (lambda y: DirichletPartitioner(10, -1.0, seed=0), "alpha=-1.0"),
        (lambda y: DirichletPartitioner(10, float("nan"), seed=0), "alpha=nan"),
        (lambda y: DirichletPartitioner(0, 0.5, seed=0), "num_clients=0"),
        (lambda y: partition_labels(y, 0, "iid"), "num_clients=0"),
        (lambda y: partition_labels(y, 10, "pathological"), "method='pathological'"),
        (lambda y: partition_labels(y[:50], 51, "dirichlet", min_size=1), "num_clients=51"),
        (lambda y: DirichletPartitioner(10, 0.5, seed=0, min_size=0), "min_size=0"),
        (lambda y: partition_labels(y[:100], 20, "dirichlet", min_size=10), "min_size=10"),
        (lambda y: shard_partition(y[:100], 60, 2, seed=0), "shards_per_client=2"),
        (lambda y: shard_partition(y, 10, 0, seed=0), "shards_per_client=0"),
        (lambda y: partition_labels(np.empty(0), 2, "iid"), "shape (0,)"),
        (lambda y: label_counts(y, [np.arange(10)], 5), "num_classes"),
    ],
)
def test_bad_values_are_named(labels: np.ndarray, call, needle: str) -> None:
    with pytest.raises(PartitionError) as err:
        call(labels)
    assert needle in str(err.value)
    assert "\n" not in str(err.value)


def test_unknown_method_lists_accepted_ones(labels: np.ndarray) -> None:
    with pytest.raises(PartitionError) as err:
        partition_labels(labels, 10, "bogus")
    for method in PARTITION_METHODS:
        assert method in str(err.value)


def test_partition_error_is_value_error() -> None:
    assert issubclass(PartitionError, ValueError)
