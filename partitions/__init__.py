"""Label-based splits of a dataset over federated clients.

Kept as its own top-level package so that data partitioning can be tested,
benchmarked and reused without importing the simulator (Flower, Torch, Ray).
"""

from partitions.dirichlet import DirichletPartitioner, PartitionError, label_counts
from partitions.flwr import flwr_problem, is_flwr
from partitions.simple import (
    PARTITION_METHODS,
    iid_partition,
    partition_labels,
    partition_problem,
    shard_partition,
)
from partitions.tasks import TASK_NAMES, task_labels, task_of

__all__ = [
    "PARTITION_METHODS",
    "DirichletPartitioner",
    "PartitionError",
    "TASK_NAMES",
    "flwr_problem",
    "iid_partition",
    "is_flwr",
    "label_counts",
    "partition_labels",
    "partition_problem",
    "shard_partition",
    "task_labels",
    "task_of",
]
