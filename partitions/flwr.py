"""flwr-datasets' partitioners over the project's own data: `--partition flwr:NAME --partition-args JSON`.

The run's training labels are held as a Hugging Face `datasets.Dataset` (a `label` column and
each sample's `index`), handed to the partitioner NAME of `flwr_datasets.partitioner`
(DirichletPartitioner with its minimum size and self-balancing, PathologicalPartitioner,
ShardPartitioner, InnerDirichletPartitioner, ...), and each client gets the indices of its
`load_partition`. Nothing is downloaded. fedpfn sets `num_partitions` (`--num-clients`), `seed`
(drawn from the run seed, as every partition's is) and `partition_by="label"` where the class
takes them; `--partition-args` gives the rest. flwr-datasets is an optional extra
(`pip install -e '.[flwr-datasets]'`), imported only for such a partition.
"""

from __future__ import annotations

import inspect
import json
from typing import Any

import numpy as np

from partitions.dirichlet import PartitionError

PREFIX = "flwr:"
INSTALL = "pip install -e '.[flwr-datasets]'"
SET_BY_FEDPFN = {"num_partitions": "--num-clients", "seed": "--seed"}  # never in --partition-args


def is_flwr(method: str) -> bool:
    return isinstance(method, str) and method.startswith(PREFIX)


def partitioner_class(method: str) -> type:
    """The class `flwr:NAME` names in flwr_datasets.partitioner; PartitionError, one line, if none."""
    try:
        from flwr_datasets import partitioner as module
    except ImportError:
        raise PartitionError(f"partition: {method} needs flwr-datasets, an optional extra: {INSTALL}") from None
    name = method[len(PREFIX) :]
    cls = getattr(module, name, None)
    if not (inspect.isclass(cls) and issubclass(cls, module.Partitioner) and cls is not module.Partitioner):
        known = sorted(n for n in dir(module) if n.endswith("Partitioner") and n != "Partitioner")
        raise PartitionError(f"partition: flwr-datasets has no partitioner '{name}'; use one of {', '.join(known)}")
    return cls


def parse_args(text: str) -> dict[str, Any]:
    """`--partition-args`: a JSON object ('' is none); PartitionError, one line, otherwise."""
    try:
        args = json.loads(text) if text.strip() else {}
    except json.JSONDecodeError as err:
        raise PartitionError(f"partition_args: '{text}' is not JSON ({err.msg}); give an object, e.g. '{{\"alpha\": 0.5}}'") from None
    if not isinstance(args, dict):
        raise PartitionError(f"partition_args: '{text}' is not a JSON object of keyword arguments")
    return args


def keyword_arguments(cls: type, args: dict[str, Any], num_clients: int, seed: int) -> dict[str, Any]:
    """The partitioner's arguments: the user's, with fedpfn's where the class takes them."""
    taken = inspect.signature(cls.__init__).parameters
    if owned := sorted(set(args) & set(SET_BY_FEDPFN)):
        raise PartitionError(f"partition_args: {owned[0]} is set by fedpfn ({SET_BY_FEDPFN[owned[0]]}); leave it out")
    unknown = sorted(set(args) - set(taken))
    if unknown:
        accepted = ", ".join(n for n in taken if n not in ("self", *SET_BY_FEDPFN, "partition_by"))
        raise PartitionError(f"partition_args: {cls.__name__} takes no '{unknown[0]}' (it takes {accepted})")
    ours = {"num_partitions": num_clients, "seed": seed, "partition_by": "label"}
    return {**{k: v for k, v in ours.items() if k in taken}, **args}


def flwr_problem(method: str, args_text: str) -> str | None:
    """Why `--partition method --partition-args args_text` cannot run, one line, or None (nothing split)."""
    try:
        cls = partitioner_class(method)
        kwargs = keyword_arguments(cls, parse_args(args_text), 1, 0)
        inspect.signature(cls.__init__).bind(None, **kwargs)
    except PartitionError as err:
        return str(err)
    except TypeError as err:
        return f"partition_args: {method.removeprefix(PREFIX)} cannot take {args_text or 'no arguments'} ({err})"
    return None


def flwr_partition(labels: np.ndarray, num_clients: int, method: str, args_text: str, seed: int) -> list[np.ndarray]:
    """Each client's sorted indices into `labels`, as flwr-datasets' partitioner deals them."""
    from datasets import Dataset

    cls = partitioner_class(method)
    kwargs = keyword_arguments(cls, parse_args(args_text), num_clients, seed)
    name = method.removeprefix(PREFIX)
    try:
        partitioner = cls(**kwargs)
        columns = {"label": np.asarray(labels, np.int64), "index": np.arange(len(labels))}
        partitioner.dataset = Dataset.from_dict(columns).with_format("arrow")  # a column is read whole, not row by row
        if partitioner.num_partitions != num_clients:
            raise PartitionError(f"partition: {name} makes {partitioner.num_partitions} partitions, but --num-clients is {num_clients}")
        parts = [np.sort(np.asarray(partitioner.load_partition(k)["index"], dtype=np.int64)) for k in range(num_clients)]
    except PartitionError:
        raise
    except Exception as err:  # noqa: BLE001  (flwr-datasets refuses settings with ValueError, KeyError, ...)
        raise PartitionError(f"partition: {name}({json.dumps(kwargs)}) failed: {type(err).__name__}: {err}") from None
    if empty := [k for k, part in enumerate(parts) if part.size == 0]:
        raise PartitionError(f"partition: {name} left client {empty[0]} without samples; every client needs some")
    return parts
