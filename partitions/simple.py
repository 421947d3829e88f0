"""IID and shard splits, plus the ``partition_labels`` entry point used by the simulator.

IID is the no-skew baseline; shards (McMahan et al., 2017) give each client
a few whole label blocks, the classic pathological non-IID setting.
"""

from __future__ import annotations

import numpy as np

from partitions.dirichlet import (
    DirichletPartitioner,
    PartitionError,
    check_count,
    check_labels,
    check_num_clients,
    shuffled_by_label,
    split_sorted,
)
from partitions.flwr import flwr_partition, is_flwr
from partitions.tasks import restricted_to_tasks

PARTITION_METHODS = ("dirichlet", "iid", "shards", "tasks")  # tasks: partitions/tasks.py


def partition_problem(method: str) -> str | None:
    """Why `method` names no partition: one of PARTITION_METHODS, or flwr:NAME (partitions/flwr.py)."""
    if method in PARTITION_METHODS or is_flwr(method):
        return None
    return f"unknown '{method}'; use one of {', '.join(PARTITION_METHODS)}, or flwr:NAME (a flwr-datasets partitioner)"


def iid_partition(labels: np.ndarray, num_clients: int, seed: int) -> list[np.ndarray]:
    """Deal a seeded permutation into near-equal parts (sizes differ by at most one)."""
    labels = check_labels(labels)
    num_clients = check_num_clients(num_clients, labels.size)
    perm = np.random.default_rng(seed).permutation(labels.size)
    return [np.sort(part).astype(np.int64, copy=False) for part in np.array_split(perm, num_clients)]


def shard_partition(labels: np.ndarray, num_clients: int, shards_per_client: int, seed: int) -> list[np.ndarray]:
    """Sort by label, cut into ``num_clients * shards_per_client`` shards and deal them out at random.

    Each client then sees about ``shards_per_client`` classes (one more per
    shard that straddles a class boundary).
    """
    labels = check_labels(labels)
    num_clients = check_num_clients(num_clients, labels.size)
    shards_per_client = check_count("shards_per_client", shards_per_client, 1)
    num_shards = num_clients * shards_per_client
    if num_shards > labels.size:
        raise PartitionError(
            f"num_clients={num_clients} x shards_per_client={shards_per_client} = {num_shards} shards exceeds "
            f"the {labels.size} samples; use fewer clients or shards_per_client <= {labels.size // num_clients}"
        )
    rng = np.random.default_rng(seed)
    # Shuffled inside each label, so which samples of a class land in which shard is seeded too.
    by_label, _ = shuffled_by_label(labels, rng)
    # Position i of the label-sorted order falls in shard floor(i * shards / n): contiguous, near-equal shards.
    shard_of_position = np.arange(labels.size, dtype=np.int64) * num_shards // labels.size
    # Every client gets exactly shards_per_client randomly chosen shards.
    client_of_shard = rng.permutation(num_shards) % num_clients
    client_of_sample = np.empty(labels.size, dtype=np.int64)
    client_of_sample[by_label] = client_of_shard[shard_of_position]
    return split_sorted(client_of_sample, num_clients)


def partition_labels(
    labels: np.ndarray,
    num_clients: int,
    method: str,
    *,
    alpha: float = 0.5,
    shards_per_client: int = 2,
    min_size: int = 10,
    seed: int = 0,
    flwr_args: str = "",
) -> list[np.ndarray]:
    """Split sample indices over clients by ``method`` (one of PARTITION_METHODS).

    One entry point keeps the method a plain config string; ``alpha`` and
    ``min_size`` only apply to "dirichlet", ``shards_per_client`` to "shards", ``flwr_args`` (a JSON
    object) to "flwr:NAME".
    """
    if method == "dirichlet":
        return DirichletPartitioner(num_clients, alpha, seed, min_size=min_size).split(labels)
    if method == "iid":
        return iid_partition(labels, num_clients, seed)
    if method == "shards":
        return shard_partition(labels, num_clients, shards_per_client, seed)
    if method == "tasks":
        return restricted_to_tasks(check_labels(labels), iid_partition(labels, num_clients, seed))
    if is_flwr(method):  # flwr:NAME, one of flwr-datasets' partitioners (partitions/flwr.py)
        return flwr_partition(check_labels(labels), num_clients, method, flwr_args, seed)
    raise PartitionError(f"method={method!r} is unknown; use one of {', '.join(PARTITION_METHODS)}")
