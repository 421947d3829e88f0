"""flwr-datasets' partitioners over the project's own data (issue 43 item 6): `--partition
flwr:NAME --partition-args JSON`, offline, on Fashion-MNIST's labels held as a `datasets.Dataset`."""

from __future__ import annotations

import builtins
import json

import numpy as np
import pytest

pytest.importorskip("flwr_datasets")  # the optional extra; `make test` installs it (the test extra)

from datasets import Dataset  # noqa: E402
from flwr_datasets.partitioner import DirichletPartitioner  # noqa: E402

from fedpfn.core.cache import client_indices  # noqa: E402
from fedpfn.core.data import load_dataset  # noqa: E402
from fedpfn.core.files import CONFIG  # noqa: E402
from fedpfn.runtime.nodedata import partition_settings  # noqa: E402
from fedpfn.runtime.simulation import simulate  # noqa: E402
from partitions import partition_labels  # noqa: E402
from partitions.flwr import INSTALL  # noqa: E402
from tests.support.commands import refused
from tests.support.config import tiny_config

DIRICHLET = '{"alpha": 0.5, "min_partition_size": 10}'


@pytest.fixture(scope="module")
def labels() -> np.ndarray:
    return load_dataset("fmnist").train_y.numpy()[:3000]  # Fashion-MNIST's first 3,000 training labels


def test_the_clients_get_what_flwr_datasets_deals_on_the_same_dataset(labels):
    """Our indices are exactly those flwr-datasets' own DirichletPartitioner gives on a Dataset of the
    labels, seeded: every sample once, the minimum size held, the same again for the same seed."""
    parts = partition_labels(labels, 5, "flwr:DirichletPartitioner", seed=7, flwr_args=DIRICHLET)
    theirs = DirichletPartitioner(num_partitions=5, partition_by="label", alpha=0.5, min_partition_size=10, seed=7)
    theirs.dataset = Dataset.from_dict({"label": labels, "index": np.arange(len(labels))})
    expected = [np.sort(theirs.load_partition(k)["index"][:]) for k in range(5)]
    assert all(np.array_equal(mine, their) for mine, their in zip(parts, expected))
    assert sorted(np.concatenate(parts).tolist()) == list(range(len(labels))) and min(map(len, parts)) >= 10
    again = partition_labels(labels, 5, "flwr:DirichletPartitioner", seed=7, flwr_args=DIRICHLET)
    assert all(np.array_equal(a, b) for a, b in zip(parts, again))
    other = partition_labels(labels, 5, "flwr:DirichletPartitioner", seed=8, flwr_args=DIRICHLET)
    assert not all(np.array_equal(a, b) for a, b in zip(parts, other))


def test_a_pathological_partition_gives_each_client_its_classes(labels):
    args = '{"num_classes_per_partition": 2, "class_assignment_mode": "deterministic"}'
    parts = partition_labels(labels, 5, "flwr:PathologicalPartitioner", seed=1, flwr_args=args)
    assert [len(np.unique(labels[part])) for part in parts] == [2] * 5


def test_a_run_records_the_partitioner_and_its_arguments(tmp_path):
    out = tmp_path / "run"
    cfg = tiny_config(out=str(out), rounds=1, partition="flwr:DirichletPartitioner", partition_args=DIRICHLET)
    simulate(cfg, show_progress=False)
    saved = json.loads((out / CONFIG).read_text())
    assert (saved["partition"], saved["partition_args"]) == ("flwr:DirichletPartitioner", DIRICHLET)
    sizes = json.loads((out / "partition.json").read_text())["clients"]
    assert [sum(client["label_counts"]) for client in sizes] == [len(part) for part in client_indices(cfg)]
    assert (out / "partition.png").is_file()
    assert partition_settings(cfg, 0)["partition_args"] == DIRICHLET


def test_without_one_the_settings_read_as_before():
    """No partition_args in config.json, the fingerprint or an exported partition's settings."""
    cfg = tiny_config()
    assert "partition_args" not in cfg.to_dict() and "partition_args" not in partition_settings(cfg, 0)


@pytest.mark.parametrize(
    "args,message",
    [
        (["--partition", "flwr:Nope"], "partition: flwr-datasets has no partitioner 'Nope'; use one of"),
        (["--partition", "flwr"], "partition: unknown 'flwr'; use one of dirichlet, iid, shards, tasks, or flwr:NAME"),
        (["--partition", "flwr:DirichletPartitioner"], "DirichletPartitioner cannot take no arguments (missing a"),
        (["--partition", "flwr:DirichletPartitioner", "--partition-args", '{"alpha": 0.5, "seed": 3}'],
         "partition_args: seed is set by fedpfn (--seed); leave it out"),
        (["--partition", "flwr:ShardPartitioner", "--partition-args", '{"shards": 2}'],
         "partition_args: ShardPartitioner takes no 'shards' (it takes num_shards_per_partition, shard_size"),
        (["--partition", "flwr:IidPartitioner", "--partition-args", "[2]"], "'[2]' is not a JSON object"),
        (["--partition-args", '{"alpha": 0.5}'], "partition_args: {\"alpha\": 0.5} is set, but only --partition flwr:NAME"),
        (["--partition", "flwr:IidPartitioner", "--min-partition-size", "5"], "min_partition_size: 5 is set, but flwr:NAME"),
        (["--partition", "flwr:DirichletPartitioner", "--partition-args", '{"alpha": 0.5, "min_partition_size": 16000}'],
         "partition: DirichletPartitioner("),
    ],
)  # fmt: skip
def test_what_cannot_partition_is_refused_in_one_line(tmp_path, capsys, monkeypatch, args, message):
    flags = ["--model", "mlp", "--num-clients", "4", "--clients-per-round", "2", *args]
    lines = refused(capsys, monkeypatch, *flags, "--out", str(tmp_path / "run"))
    assert len(lines) == 1 and message in lines[0], lines
    assert not (tmp_path / "run").exists()


def test_without_flwr_datasets_the_refusal_says_how_to_install_it(tmp_path, capsys, monkeypatch):
    real_import = builtins.__import__

    def no_flwr_datasets(name, *args, **kwargs):
        if name.startswith("flwr_datasets"):
            raise ImportError(f"No module named '{name}'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_flwr_datasets)
    lines = refused(capsys, monkeypatch, "--partition", "flwr:IidPartitioner", "--out", str(tmp_path / "run"))
    assert lines == [f"error: partition: flwr:IidPartitioner needs flwr-datasets, an optional extra: {INSTALL}"]


# --- FederatedDataset: --dataset hf:NAME ------------------------------------------------------------------


def hf_folder(folder, columns=("image", "label")):
    """A Hugging Face dataset on disk: train.parquet and test.parquet of 8 x 8 grey images, 3 classes."""
    from datasets import ClassLabel, Features, Image
    from PIL import Image as PILImage

    rng = np.random.default_rng(0)
    folder.mkdir()
    for split, n in (("train", 60), ("test", 20)):
        images = [PILImage.fromarray(rng.integers(0, 255, (8, 8), dtype=np.uint8)) for _ in range(n)]
        features = Features({columns[0]: Image(), columns[1]: ClassLabel(num_classes=3)})
        Dataset.from_dict({columns[0]: images, columns[1]: rng.integers(0, 3, n)}, features=features).to_parquet(
            folder / f"{split}.parquet"
        )
    return folder


def test_a_dataset_folder_runs_through_federated_dataset_offline(tmp_path, monkeypatch):
    """FederatedDataset loads both splits of a folder (no network), here partitioned by flwr-datasets too."""
    import run_sim

    folder = hf_folder(tmp_path / "my_set")
    args = ["--dataset", f"hf:{folder}", "--model", "mlp", "--num-clients", "3", "--clients-per-round", "3",
            "--partition", "flwr:IidPartitioner", "--rounds", "1", "--out", str(tmp_path / "run")]  # fmt: skip
    assert run_sim.main(args) == 0
    saved = json.loads((tmp_path / "run" / CONFIG).read_text())
    assert saved["dataset"] == f"hf:{folder}"
    data = load_dataset(f"hf:{folder}")
    assert tuple(data.train_x.shape) == (60, 1, 8, 8) and len(data.test_y) == 20 and data.num_classes == 3
    assert abs(float(data.train_x.mean())) < 1e-4  # standardised with the training split's statistics


def test_a_named_dataset_offline_is_refused_in_one_line_at_once(tmp_path, capsys, monkeypatch):
    import socket

    def no_network(host, port, *args, **kwargs):
        raise socket.gaierror(-2, "Name or service not known")

    monkeypatch.setattr(socket, "getaddrinfo", no_network)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    lines = refused(capsys, monkeypatch, "--dataset", "hf:ylecun/mnist", "--out", str(tmp_path / "run"))
    assert lines == [
        "error: dataset: hf:ylecun/mnist is fetched from the Hugging Face Hub, which this machine cannot reach "
        "(huggingface.co: Name or service not known); give a dataset folder on disk (--dataset hf:/path/to/folder)"
    ]
    assert not (tmp_path / "run").exists()


def test_a_dataset_without_image_and_label_columns_is_refused_in_one_line(tmp_path, capsys, monkeypatch):
    folder = hf_folder(tmp_path / "odd", columns=("picture", "target"))
    capsys.readouterr()  # the parquet files' writing
    lines = refused(capsys, monkeypatch, "--dataset", f"hf:{folder}", "--model", "mlp", "--out", str(tmp_path / "run"))
    assert len(lines) == 1 and "has columns picture, target; fedpfn reads an image column (image or img" in lines[0]
