"""Run folders written by hand with known numbers: finished, unfinished (as a kill leaves one) or a
study's runs, for the report, resume and reliability tests."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from fedpfn.analysis.report import main
from fedpfn.runtime.runfolder import RunFolder
from tests.support.config import tiny_config

SETTING: dict[str, Any] = {
    "algorithm": "fedavg", "server": "fedavg", "dataset": "fmnist", "model": "cnn", "num_clients": 20,
    "clients_per_round": 10, "rounds": 6, "partition": "dirichlet", "alpha": 0.1, "shards_per_client": 2,
    "min_partition_size": 10, "local_epochs": 1, "batch_size": 64, "lr": 0.05, "eval_every": 1, "seed": 0,
    "checkpoint_every": 1, "overwrite": False,
}  # fmt: skip


OUTSIDE = b"a file outside the run folder, which must never change\n"


def metrics_row(number: int) -> dict:
    return {"round": number, "test_accuracy": 0.5, "test_loss": 1.0, "train_loss": 1.0, "clients": [0, 1],
            "failed_partitions": [], "missing_partitions": [], "skipped": False, "num_clients": 2,
            "num_failures": 0, "bytes_up": 10, "bytes_down": 10}  # fmt: skip


def resumable_run(path: Path, **changes) -> RunFolder:
    """An unfinished run as a kill leaves it: config, round 1's row and its checkpoint (the real model)."""
    from fedpfn.core.cache import initial_model
    from fedpfn.runtime.algorithms import build_strategy

    cfg = tiny_config(out=str(path))
    folder = RunFolder(path)
    with folder.exclusive():
        folder.start(cfg.to_dict(), overwrite=False)
    folder.append_metrics(metrics_row(1))
    net = initial_model(cfg)
    model = {k: v.numpy() for k, v in net.state_dict().items()}
    strategy = build_strategy(cfg, net).state()
    tree = {"round": 1, "elapsed_seconds": 1.0, "model": model, "strategy": strategy, **changes}
    folder.save_checkpoint(cfg.fingerprint(), tree)
    return folder


def edit_config(folder: Path, **changes) -> None:
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, **changes}))


def write_run(
    folder: Path,
    accuracies: list[float | None],
    finished: bool = True,
    up: int = 2_000_000,
    down: int = 2_000_000,
    **settings: Any,
) -> Path:
    """A run folder whose test accuracy at round r is accuracies[r-1] (None: not evaluated), sending
    `up` bytes up and `down` bytes down every round."""
    folder.mkdir(parents=True)
    config = {**SETTING, **settings, "rounds": len(accuracies), "out": str(folder)}
    (folder / "config.json").write_text(json.dumps(config))
    rows = [
        {"round": r, "test_accuracy": acc, "test_loss": None if acc is None else 1 - acc, "train_loss": 1 / r,
         "bytes_up": up, "bytes_down": down, "num_clients": 10, "num_failures": 0}
        for r, acc in enumerate(accuracies, 1)
    ]  # fmt: skip
    (folder / "metrics.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    if finished:
        (folder / "summary.json").write_text("{}")
    return folder


def run_report(capsys, *args: str) -> tuple[int, str, str]:
    code = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


FEDAVG_FINAL = [0.80, 0.85, 0.70, 0.75]


FEDPFN_FINAL = [0.82, 0.84, 0.73, 0.79]


def finished_runs(folder: Path, seeds: tuple[int, ...] = (0, 1, 2)) -> Path:
    """A ColD study's runs as their config.json and summary.json say (no model: the evaluation is stubbed)."""
    config = {"partition": "tasks", "personal": "classifier.*", "init": "start.safetensors", "model": "mlp",
              "num_clients": 8, "rounds": 2, "local_epochs": 1, "lr": 0.01, "batch_size": 64, "validation_fraction": 0.5,
              "data_root": None, "optimizer": "sgd", "momentum": 0.9, "weight_decay": 5e-4, "engine": "batched"}  # fmt: skip
    anchored = {"algorithm": "fedpfn", "fedpfn.anchor_ratio": 0.4, "fedpfn.anchor_granularity": "weight"}
    arms = {"plain": {"algorithm": "fedavg"}, "shared": {**anchored, "fedpfn.anchor_masks": "shared"},
            "independent": {**anchored, "fedpfn.anchor_masks": "client"}}  # fmt: skip
    for seed in seeds:
        for arm, extra in arms.items():
            run = folder / arm / f"s{seed}"
            run.mkdir(parents=True)
            (run / "config.json").write_text(json.dumps({**config, **extra, "seed": seed}))
            (run / "summary.json").write_text(json.dumps({"wall_seconds": 12.5}))
    return folder
