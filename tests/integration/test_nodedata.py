"""A node's own copy of its partition (fedpfn/runtime/nodedata.py, scripts/export_partition.py) and state.

Training on the memory-mapped copy must give the simulation's numbers bit for bit, with the
held-out validation set and the local test split on; a copy of other settings is refused in
one line. A deployed node caches its partition under its own FLWR_HOME; the multi-host
rehearsal (tests/deploy/test_deploy.py) runs exported partitions and node-side state for real.
"""

from __future__ import annotations

import dataclasses
import json
import shlex
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from flwr.app import ArrayRecord, RecordDict

from fedpfn.runtime import nodedata
from fedpfn.core import protocol
from fedpfn.runtime.engines.program import local_round
from fedpfn.runtime.algorithms import build_strategy, client_rules
from fedpfn.core.cache import SplitKey, client_indices, dataset_for, initial_model, local_split
from fedpfn.core.config import RunConfig
from fedpfn.core.groups import Iid
from fedpfn.runtime.nodedata import PartitionDataError, read_partition, write_partition
from fedpfn.runtime.server import train_config, with_accepted_round
from tests.support.config import tiny_config
from tests.support.rounds import NodeGrid
from tests.support.site_commands import fedpfn_here

REPO = Path(__file__).resolve().parents[2]
EXPORT = REPO / "scripts" / "export_partition.py"
# Both features that decide which samples a client trains on, and a label-skewed split.
SPLIT = dict(
    validation_fraction=0.1, local_test_fraction=0.2, partition="dirichlet", alpha=0.5, num_clients=3
)
IGNORED = {protocol.TRAIN_SECONDS}  # wall time, the one metric that may differ


def two_rounds(
    cfg: RunConfig, partition_id: int, node: Path | None, state_root: Path | None
) -> list[RecordDict]:
    """Two rounds of one client, the second resumed (empty context: its state comes from disk).

    `node`: train on the partition exported there, else on the whole dataset (simulation).
    """
    strategy = build_strategy(cfg, initial_model(cfg))
    arrays = ArrayRecord(initial_model(cfg).state_dict())
    data = read_partition(cfg, partition_id, node) if node is not None else None
    replies = []
    for server_round in (1, 2):
        config = train_config(cfg, server_round)
        (message,) = strategy.configure_train(server_round, arrays, config, NodeGrid([partition_id]))
        cpu, content = torch.device("cpu"), with_accepted_round(message, server_round - 1).content
        content = local_round(
            client_rules(cfg), cfg, partition_id, RecordDict(), cpu, content, data=data, state_root=state_root
        )
        replies.append(content)
        arrays = content.array_records[protocol.ARRAYS]
    return replies


def same_reply(a: RecordDict, b: RecordDict) -> None:
    """Every array bit for bit, every metric but the wall time equal."""
    assert a.array_records.keys() == b.array_records.keys()
    for name in a.array_records:
        left, right = a.array_records[name].to_numpy_ndarrays(), b.array_records[name].to_numpy_ndarrays()
        assert len(left) == len(right) and all(np.array_equal(x, y) for x, y in zip(left, right)), name
    metrics_a, metrics_b = a.metric_records[protocol.METRICS], b.metric_records[protocol.METRICS]
    assert {k: v for k, v in metrics_a.items() if k not in IGNORED} == {
        k: v for k, v in metrics_b.items() if k not in IGNORED
    }


@pytest.mark.parametrize("algorithm", ["fedpfn", "scaffold", "moon"])
def test_training_on_the_node_copy_is_the_simulation_bit_for_bit(tmp_path: Path, algorithm: str) -> None:
    cfg = tiny_config(algorithm=algorithm, **SPLIT)
    pid = 1
    meta = write_partition(cfg, pid, tmp_path / "part")
    held_out = set(local_split(cfg, pid)[1].tolist())
    assert meta["num_examples"] == len(client_indices(cfg)[pid]) and held_out, "the local split must be on"

    simulated = two_rounds(cfg, pid, node=None, state_root=None)
    on_node = two_rounds(cfg, pid, node=tmp_path / "part", state_root=tmp_path / "state")
    for sim, node in zip(simulated, on_node):
        same_reply(sim, node)
        metrics = node.metric_records[protocol.METRICS]
        assert metrics[protocol.NUM_EXAMPLES] == len(client_indices(cfg)[pid]) - len(held_out)
        assert protocol.LOCAL_ACC_AFTER in metrics
    # the node's state lives where it was told, the simulation's in the run folder
    node_state = sorted(p.relative_to(tmp_path).as_posix() for p in (tmp_path / "state").rglob("*.npz"))
    sim_state = sorted(p.relative_to(cfg.run_dir).as_posix() for p in cfg.run_dir.rglob("*.npz"))
    assert [f"state/{p.removeprefix('client_state/')}" for p in sim_state] == node_state
    assert bool(node_state) == (algorithm != "fedpfn"), node_state


def test_a_copy_is_refused_for_other_settings_in_one_line(tmp_path: Path) -> None:
    cfg = tiny_config(**SPLIT)
    folder = tmp_path / "part"
    meta = write_partition(cfg, 2, folder)
    # what is checked: SplitKey's fields (a field added there is checked too), but not where
    # the data was read from, and the partition id
    checked = {f.name for f in dataclasses.fields(SplitKey)} - set(nodedata.LOCATION)
    optional = {"partition_args"}  # only when given (flwr-datasets' partitioners): older copies read as before
    assert set(meta["settings"]) == (checked - optional) | {"partition_id"}
    others = {
        "seed": dataclasses.replace(cfg, seed=1),
        "validation-fraction": dataclasses.replace(
            cfg, evaluation=dataclasses.replace(cfg.evaluation, validation_fraction=0.2)
        ),
        "num-clients": dataclasses.replace(cfg, federation=dataclasses.replace(cfg.federation, num_clients=4)),
        "alpha": dataclasses.replace(cfg, partition=dataclasses.replace(cfg.partition, alpha=0.1)),
        "partition": dataclasses.replace(cfg, partition=Iid()),
    }
    for name, other in others.items():
        with pytest.raises(PartitionDataError, match=f"other settings \\({name}: ") as refused:
            read_partition(other, 2, folder)
        assert "\n" not in str(refused.value) and "export_partition.py" in str(refused.value)
    with pytest.raises(PartitionDataError, match="partition-id: 2 there, 0 in this run"):
        read_partition(cfg, 0, folder)
    # settings that do not move samples are accepted: another local split (drawn on the node
    # as in simulation), another data root (a folder without the dataset: none is read)
    split = dataclasses.replace(cfg, evaluation=dataclasses.replace(cfg.evaluation, local_test_fraction=0.5))
    elsewhere = dataclasses.replace(split, task=dataclasses.replace(split.task, data_root=str(tmp_path)))
    data = read_partition(elsewhere, 2, folder)
    assert len(data.train) + len(data.local_test) == meta["num_examples"]
    assert torch.equal(client_indices(cfg)[2][data.local_test], local_split(split, 2)[1])


def test_damaged_or_foreign_folders_are_refused(tmp_path: Path) -> None:
    cfg = tiny_config()
    with pytest.raises(PartitionDataError, match="no readable partition.json"):
        read_partition(cfg, 0, tmp_path / "missing")
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    with pytest.raises(PartitionDataError, match=r"holds other files \(notes.txt\)"):
        write_partition(cfg, 0, foreign)
    assert [p.name for p in foreign.iterdir()] == ["notes.txt"]
    folder = tmp_path / "part"
    write_partition(cfg, 0, folder)
    write_partition(cfg, 0, folder)  # an earlier export is replaced
    np.save(folder / nodedata.Y, np.zeros(3, dtype=np.int64))
    with pytest.raises(PartitionDataError, match="the arrays do not match partition.json; export again"):
        read_partition(cfg, 0, folder)
    (folder / nodedata.META).write_text('{"format": "other"}')
    with pytest.raises(PartitionDataError, match="not a fedpfn-partition/1 folder"):
        read_partition(cfg, 0, folder)


def test_node_config_picks_the_copy_and_the_state_folder(tmp_path: Path) -> None:
    """In simulation (this process is no flwr-clientapp) nothing changes unless a node says so."""
    cfg = tiny_config()
    assert not nodedata.deployed()
    assert nodedata.for_node(cfg, 0, {"partition-id": 0}) is None
    assert nodedata.state_root(cfg, {"partition-id": 0}) is None
    write_partition(cfg, 0, tmp_path / "part")
    data = nodedata.for_node(cfg, 0, {"partition-id": 0, nodedata.PARTITION_DIR: str(tmp_path / "part")})
    assert data is not None and len(data.train) == len(client_indices(cfg)[0])
    node = {nodedata.STATE_DIR: str(tmp_path / "state")}
    root = nodedata.state_root(cfg, node)
    other = nodedata.state_root(cfg.in_folder(str(tmp_path / "other")), node)
    assert root is not None and root.parent == tmp_path / "state" and root.name.startswith(cfg.run_dir.name)
    assert other != root, "each run folder gets its own state folder on the node"


def export(*args: str) -> subprocess.CompletedProcess:
    """`fedpfn partition ARGS` in this process: the main the script calls, without Python's and
    torch's start again (about 3 s a call); the script itself runs as a user runs it once below."""
    return fedpfn_here(shlex.join(["fedpfn", "partition", *args]))


@pytest.mark.slow  # about 17 s at load 7: the script as a subprocess once, three exports in-process
def test_export_script_writes_what_the_node_reads(tmp_path: Path) -> None:
    cfg = tiny_config(**SPLIT, out=str(tmp_path / "run"))
    config = tmp_path / "config.json"
    config.write_text(cfg.to_json())
    script = [sys.executable, str(EXPORT), "--config", str(config)]
    result = subprocess.run([*script, "--to", f"0={tmp_path / 'n0'}", "--to", f"2={tmp_path / 'n2'}"],
                            capture_output=True, text=True, timeout=300)  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert f"partition 2: {len(client_indices(cfg)[2])} examples" in result.stdout
    whole = dataset_for(cfg)
    for pid in (0, 2):
        data, full = read_partition(cfg, pid, tmp_path / f"n{pid}"), client_indices(cfg)[pid]
        assert torch.equal(data.x, whole.train_x[full]) and torch.equal(data.y, whole.train_y[full])
    # flwr-style pairs over a preset: the settings a `flwr run --run-config` would give
    quickstart = str(REPO / "configs" / "quickstart.toml")
    preset = export("--config", quickstart, "--run-config", "seed=3 num-clients=2", "--to", f"1={tmp_path}/q1")
    assert preset.returncode == 0, preset.stderr
    quick = json.loads((tmp_path / "q1" / nodedata.META).read_text())["settings"]
    assert quick["run_seed"] == 3 and quick["num_clients"] == 2 and quick["method"] == "iid"
    for args, message in [
        (["--to", f"0={tmp_path / 'y'}", "--to", f"5={tmp_path / 'x'}"], "partition 5 does not exist: num-clients is 3"),
        (["--run-config", "no-such=1", "--to", f"0={tmp_path / 'x'}"], "no-such"),
    ]:
        bad = export("--config", str(config), *args)
        assert bad.returncode == 2 and message in bad.stderr and "Traceback" not in bad.stderr, bad.stderr
    assert not (tmp_path / "x").exists() and not (tmp_path / "y").exists(), "nothing written before the checks"


def test_a_deployed_node_caches_its_partition_under_its_flower_home(tmp_path: Path, monkeypatch) -> None:
    """A node without an export writes its partition at its first message and keeps the last few."""
    cfg = tiny_config(**SPLIT, out=str(tmp_path / "run"))
    monkeypatch.setattr(nodedata, "deployed", lambda: True)  # what a flwr-clientapp process sees
    monkeypatch.setenv("FLWR_HOME", str(tmp_path / "home"))
    whole, cache = dataset_for(cfg), tmp_path / "home" / "fedpfn" / "partitions"
    first = nodedata.for_node(cfg, 0, {"partition-id": 0})
    (folder,) = cache.iterdir()
    written = (folder / nodedata.X).stat().st_mtime_ns
    again = nodedata.for_node(cfg, 0, {"partition-id": 0})
    assert (folder / nodedata.X).stat().st_mtime_ns == written, "the second message reads the cache"
    for data in (first, again):
        full = client_indices(cfg)[0]
        assert torch.equal(data.x, whole.train_x[full]) and torch.equal(data.y, whole.train_y[full])
    for seed in range(1, nodedata.CACHE_KEEP + 2):  # other settings: other partitions
        nodedata.for_node(dataclasses.replace(cfg, seed=seed), 0, {"partition-id": 0})
    assert len(list(cache.iterdir())) == nodedata.CACHE_KEEP and not folder.exists(), "oldest dropped"
    root = nodedata.state_root(cfg, {})
    assert root is not None and root.parent == tmp_path / "home" / "fedpfn" / "client-state"
