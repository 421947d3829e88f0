"""What a deployed node keeps on its own disk: its training partition, and its clients' state.

Deployed, every message starts a fresh ClientApp process; loading the whole dataset and
partitioning it again was most of fedpfn's share of a deployed round
(benchmarks/bench_clientapp_startup.py, docs/deployment.md). A node keeps its partition as
two .npy files it maps into memory (nothing is read before training touches it): exported
for it by scripts/export_partition.py (node config `partition-dir`; the node then holds
nothing else), or written by its first message into its cache under FLWR_HOME. The rows are
in the order of the partition's indices, so positions into them are the simulation's
indices, and training on them gives the simulation's numbers bit for bit. The local test
split is not stored: the node draws it from the run's settings with the simulation's own
function (fedpfn.core.cache.local_positions), so one export serves any `local_test_fraction`.

Client state (SCAFFOLD's c_i, FedDyn's gradient, MOON's previous model) is kept in the run
folder in simulation; a deployed node keeps it under `state-dir` (node config), by default
in its FLWR_HOME, since the run folder is on the SuperLink's host.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import os
import shutil
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from fedpfn.core.cache import ClientData, SplitKey, client_indices, dataset_for, local_positions, train_labels
from fedpfn.core.files import DamagedFile, atomic_write_bytes, not_a_plain_file, read_json

if TYPE_CHECKING:
    from fedpfn.core.config import RunConfig

FORMAT = "fedpfn-partition/1"
META, X, Y = "partition.json", "train_x.npy", "train_y.npy"
PARTITION_DIR, STATE_DIR = "partition-dir", "state-dir"  # node-config keys
# SplitKey's fields that say where the dataset was read from, not which samples a client
# holds: a node's data-root is a path of its own, and an exported node has no dataset at all.
LOCATION = ("data_root", "download")
CACHE_KEEP = 4  # partitions a node's cache keeps (each is its share of the training set)
# SplitKey's names that differ from the settings' (--run-config) names, for messages
_SETTING = {"method": "partition", "min_size": "min-partition-size", "run_seed": "seed"}


class PartitionDataError(RuntimeError):
    """A partition folder that does not hold this run's partition; one line says why."""


def deployed() -> bool:
    """True in a deployed ClientApp process (Flower's own test, `flwr.supercore.exit`)."""
    return sys.argv[0].endswith("flwr-clientapp")


def node_home() -> Path:
    """fedpfn's folder in the node's Flower home: $FLWR_HOME, else ~/.flwr (Flower's rule)."""
    return Path(os.environ.get("FLWR_HOME") or Path.home() / ".flwr") / "fedpfn"


def partition_settings(cfg: RunConfig, partition_id: int) -> dict[str, Any]:
    """What decides which samples partition `partition_id` holds, and their order.

    Every field of fedpfn.core.cache.SplitKey (the simulation's own cache key for the split)
    except LOCATION: a field added there is checked here without a change.
    """
    key = dataclasses.asdict(SplitKey.of(cfg))
    if not key["partition_args"]:  # none (every partition but flwr-datasets'): as exported before it existed
        del key["partition_args"]
    return {"partition_id": partition_id, **{k: v for k, v in key.items() if k not in LOCATION}}


def write_partition(cfg: RunConfig, partition_id: int, folder: Path) -> dict[str, Any]:
    """Write partition `partition_id` of `cfg` into `folder`: new, empty, or written here before."""
    folder = Path(folder)
    found = folder.iterdir() if folder.is_dir() else iter(())
    foreign = sorted(p.name for p in found if not p.name.startswith((META, X, Y)))  # ours: also *.tmp
    if foreign:
        names = ", ".join(foreign[:3])
        raise PartitionDataError(f"{folder} holds other files ({names}); give a new or empty folder")
    data = dataset_for(cfg)
    indices = client_indices(cfg)[partition_id]
    meta = {
        "format": FORMAT,
        "settings": partition_settings(cfg, partition_id),
        "source": {k: getattr(SplitKey.of(cfg), k) for k in LOCATION},
        "num_examples": len(indices),
        "input_shape": list(data.input_shape),
        "num_classes": data.num_classes,
    }
    folder.mkdir(parents=True, exist_ok=True)
    labels = train_labels(cfg, torch.device("cpu"))  # a task's own (partition tasks)
    for name, rows in ((X, data.train_x[indices]), (Y, labels[indices])):
        buffer = io.BytesIO()
        np.save(buffer, rows.numpy())
        atomic_write_bytes(folder / name, buffer.getvalue())
    atomic_write_bytes(folder / META, (json.dumps(meta, indent=1) + "\n").encode())  # last: complete
    return meta


def read_partition(cfg: RunConfig, partition_id: int, folder: Path) -> ClientData:
    """The partition in `folder`, memory-mapped; refused if it was written for other settings."""
    folder = Path(folder)
    try:  # a folder handed over by whoever exported it: read as data, through the checked reader
        meta = read_json(folder / META, 1 << 20)
    except (OSError, DamagedFile) as err:
        raise PartitionDataError(f"partition folder {folder}: no readable {META} ({err})") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT or not isinstance(meta.get("settings"), dict):
        raise PartitionDataError(f"partition folder {folder}: not a {FORMAT} folder; export it again")
    if problem := not_a_plain_file(folder / X) or not_a_plain_file(folder / Y):
        raise PartitionDataError(f"partition folder {folder}: {problem}; export it again")
    stored, wanted = meta.get("settings", {}), partition_settings(cfg, partition_id)
    differ = [
        f"{_SETTING.get(k, k.replace('_', '-'))}: {stored.get(k)!r} there, {v!r} in this run"
        for k, v in wanted.items()
        if stored.get(k) != v
    ]
    if differ:
        raise PartitionDataError(
            f"partition folder {folder} holds a partition of other settings ({'; '.join(differ)}); "
            "export it again with scripts/export_partition.py"
        )
    try:  # never unpickled: numpy refuses an object array without allow_pickle
        x = np.load(folder / X, mmap_mode="c")  # copy-on-write: writable for torch, nothing read yet
        y = np.load(folder / Y, mmap_mode="c")
    except (OSError, ValueError) as err:
        raise PartitionDataError(f"partition folder {folder}: its arrays cannot be read ({err}); export again") from None
    declared = meta.get("input_shape")
    expected = (meta.get("num_examples"), *(declared if isinstance(declared, list) else [None]))
    shaped = x.ndim == 4 and x.shape == expected and y.shape == (len(x),)
    if not shaped or not isinstance(meta.get("num_classes"), int):
        raise PartitionDataError(f"partition folder {folder}: the arrays do not match {META}; export again")
    train, local_test = local_positions(cfg, partition_id, len(x))
    shape = (int(x.shape[1]), int(x.shape[2]), int(x.shape[3]))
    return ClientData(torch.from_numpy(x), torch.from_numpy(y), train, local_test, shape, meta["num_classes"])


def for_node(cfg: RunConfig, partition_id: int, node_config: Mapping[str, Any]) -> ClientData | None:
    """This node's partition, memory-mapped: exported for it, or cached by its first message.

    None in simulation: Ray's workers keep the whole dataset in memory between clients.
    """
    if PARTITION_DIR in node_config:
        return read_partition(cfg, partition_id, Path(str(node_config[PARTITION_DIR])))
    if not deployed():
        return None
    key = json.dumps([partition_id, dataclasses.asdict(SplitKey.of(cfg))], sort_keys=True)  # data_root too
    folder = node_home() / "partitions" / f"p{partition_id}-{_digest(key, 16)}"
    if not (folder / META).is_file():
        write_partition(cfg, partition_id, folder)
        _prune(folder.parent, keep=CACHE_KEEP)
    os.utime(folder / META)  # the cache keeps the partitions used last
    return read_partition(cfg, partition_id, folder)


def state_root(cfg: RunConfig, node_config: Mapping[str, Any]) -> Path | None:
    """Where this node keeps its clients' state for this run; None: the run folder (simulation).

    One sub-folder per run folder (its name and a hash of its path): a resumed run finds its
    state, another run starts without it.
    """
    base = node_config.get(STATE_DIR)
    if base is None and not deployed():
        return None
    root = Path(str(base)) if base is not None else node_home() / "client-state"
    return root / f"{cfg.run_dir.name}-{_digest(str(cfg.run_dir), 12)}"


def _digest(text: str, length: int) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:length]


def _prune(cache: Path, keep: int) -> None:
    """Drop all but the `keep` partitions used last (a folder without META is one being written)."""
    done = [p for p in cache.iterdir() if (p / META).is_file()]
    done.sort(key=lambda p: (p / META).stat().st_mtime)
    for old in done[:-keep]:
        shutil.rmtree(old, ignore_errors=True)

