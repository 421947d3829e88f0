"""Label-based splits of a dataset over federated clients.

Kept as its own top-level package so that data partitioning can be tested,
benchmarked and reused without importing the simulator (Flower, Torch, Ray).
"""

from partitions.dirichlet import DirichletPartitioner, PartitionError, label_counts
from partitions.simple import (
    PARTITION_METHODS,
    iid_partition,
    partition_labels,
    shard_partition,
)
from partitions.tasks import TASK_NAMES, task_labels, task_of

__all__ = [
    "PARTITION_METHODS",
    "DirichletPartitioner",
    "PartitionError",
    "TASK_NAMES",
    "iid_partition",
    "label_counts",
    "partition_labels",
    "shard_partition",
    "task_labels",
    "task_of",
]
