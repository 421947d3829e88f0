"""Non-IID label skew by Dirichlet proportions (Hsu et al., 2019).

Each class is spread over the clients in proportions drawn from Dir(alpha):
a small alpha gives each client a few dominant classes, a large alpha tends
to IID. Everything is vectorised, so 1,000 clients over 60,000 labels takes
milliseconds, and a redraw (to meet ``min_size``) only costs a new
(classes x clients) proportion matrix, not a pass over the samples.
"""

from __future__ import annotations

import numpy as np


class PartitionError(ValueError):
    """A partition cannot be made from the given values; the message says what would work."""


def check_labels(labels: np.ndarray) -> np.ndarray:
    """Return ``labels`` as a non-empty 1-D array, so every splitter fails the same clear way."""
    labels = np.asarray(labels)
    if labels.ndim != 1 or labels.size == 0:
        raise PartitionError(
            f"labels has shape {labels.shape}; pass a non-empty 1-D array with one label per sample"
        )
    return labels


def check_count(name: str, value: int, minimum: int) -> int:
    """Return ``value`` as an int, or name it in a PartitionError when it is not an integer >= ``minimum``."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise PartitionError(f"{name}={value!r} is invalid; use an integer >= {minimum}")
    return int(value)


def check_num_clients(num_clients: int, num_samples: int) -> int:
    """Reject client counts that would leave a client without any sample."""
    num_clients = check_count("num_clients", num_clients, 1)
    if num_clients > num_samples:
        raise PartitionError(
            f"num_clients={num_clients} exceeds the {num_samples} samples; use at most {num_samples} clients"
        )
    return num_clients


def sort_keys(values: np.ndarray) -> np.ndarray:
    """Return keys that sort like ``values``, narrowed to the smallest unsigned type when they are integers.

    NumPy's stable sort is a radix sort for 8- and 16-bit integers, roughly 10x
    faster than on int64, and labels and client ids nearly always fit.
    """
    if not np.issubdtype(values.dtype, np.integer):
        return values
    low = values.min()
    return (values - low).astype(np.min_scalar_type(values.max() - low))


def shuffled_by_label(labels: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Return the sample indices grouped by label (random order inside each group) and each group's size.

    Works for any sortable label type, so callers need no ``np.unique`` pass.
    """
    keys = sort_keys(labels)
    perm = rng.permutation(labels.size)
    by_label = perm[np.argsort(keys[perm], kind="stable")]
    sorted_keys = keys[by_label]
    starts = np.flatnonzero(np.concatenate(([True], sorted_keys[1:] != sorted_keys[:-1], [True])))
    return by_label, np.diff(starts)


def split_sorted(client_of_sample: np.ndarray, num_clients: int) -> list[np.ndarray]:
    """Turn a per-sample client id into one ascending int64 index array per client.

    A stable argsort groups the sample indices by client while keeping them
    ascending inside each group, so no per-client sort is needed.
    """
    order = np.argsort(sort_keys(client_of_sample), kind="stable").astype(np.int64, copy=False)
    sizes = np.bincount(client_of_sample, minlength=num_clients)
    return np.split(order, np.cumsum(sizes)[:-1])


class DirichletPartitioner:
    """Split sample indices over clients with per-class Dir(alpha) proportions.

    ``split`` draws from a fresh ``numpy`` Generator seeded with ``seed``, so
    the same partitioner (or the same arguments) always yields the same split.
    """

    def __init__(
        self,
        num_clients: int,
        alpha: float,
        seed: int,
        min_size: int = 10,
        max_attempts: int = 100,
    ) -> None:
        if isinstance(alpha, bool) or not isinstance(alpha, (int, float, np.number)) or not 0 < alpha < np.inf:
            raise PartitionError(f"alpha={alpha!r} is invalid; use a finite value > 0 (e.g. 0.1 skewed, 100 near-IID)")
        self.num_clients = check_count("num_clients", num_clients, 1)
        self.alpha = float(alpha)
        self.seed = seed
        # At least 1: an empty client would only fail later, inside training.
        self.min_size = check_count("min_size", min_size, 1)
        self.max_attempts = check_count("max_attempts", max_attempts, 1)

    def split(self, labels: np.ndarray) -> list[np.ndarray]:
        """Return one sorted int64 index array per client; together they cover every sample once."""
        labels = check_labels(labels)
        n = labels.size
        check_num_clients(self.num_clients, n)
        if self.min_size * self.num_clients > n:
            raise PartitionError(
                f"min_size={self.min_size} x num_clients={self.num_clients} exceeds the {n} samples; "
                f"use min_size <= {n // self.num_clients} or fewer clients"
            )
        rng = np.random.default_rng(self.seed)
        by_class, class_sizes = shuffled_by_label(labels, rng)
        counts = self._draw_counts(rng, class_sizes)
        # counts is (classes, clients) in row-major order, matching by_class's layout.
        client_ids = np.tile(np.arange(self.num_clients), class_sizes.size)
        client_of_sample = np.empty(n, dtype=np.int64)
        client_of_sample[by_class] = np.repeat(client_ids, counts.ravel())
        return split_sorted(client_of_sample, self.num_clients)

    def _draw_counts(self, rng: np.random.Generator, class_sizes: np.ndarray) -> np.ndarray:
        """Draw a (classes, clients) sample-count matrix whose client totals all reach min_size.

        Redraws are bounded by ``max_attempts`` so an impossible request fails
        fast with advice instead of looping forever.
        """
        alphas = np.full(self.num_clients, self.alpha)
        smallest = 0
        for _ in range(self.max_attempts):
            proportions = rng.dirichlet(alphas, size=class_sizes.size)
            # Floor the cumulative cut points; pinning the last one to the class
            # size keeps the split complete despite float round-off.
            cuts = np.floor(np.cumsum(proportions, axis=1) * class_sizes[:, None]).astype(np.int64)
            cuts[:, -1] = class_sizes
            counts = np.diff(cuts, axis=1, prepend=0)
            smallest = int(counts.sum(axis=0).min())
            if smallest >= self.min_size:
                return counts
        raise PartitionError(
            f"no Dirichlet draw gave all num_clients={self.num_clients} clients min_size={self.min_size} samples "
            f"with alpha={self.alpha} in {self.max_attempts} attempts (smallest client: {smallest}); "
            f"use fewer clients, a larger alpha or a smaller min_size"
        )


def label_counts(labels: np.ndarray, parts: list[np.ndarray], num_classes: int) -> np.ndarray:
    """Return the (num_clients, num_classes) int64 table of how many samples of each class each client holds."""
    labels = check_labels(labels)
    num_classes = check_count("num_classes", num_classes, 1)
    if not np.issubdtype(labels.dtype, np.integer):
        raise PartitionError(f"labels have dtype {labels.dtype}; label_counts needs integer class ids 0..num_classes-1")
    if labels.min() < 0 or labels.max() >= num_classes:
        raise PartitionError(
            f"labels span {labels.min()}..{labels.max()}, outside 0..{num_classes - 1}; "
            f"pass num_classes > {labels.max()} and non-negative integer labels"
        )
    sizes = np.array([len(p) for p in parts], dtype=np.int64)
    indices = np.concatenate(parts).astype(np.int64, copy=False) if parts else np.empty(0, np.int64)
    client_of = np.repeat(np.arange(len(parts)), sizes)
    flat = np.bincount(client_of * num_classes + labels[indices], minlength=len(parts) * num_classes)
    return flat.reshape(len(parts), num_classes).astype(np.int64, copy=False)
