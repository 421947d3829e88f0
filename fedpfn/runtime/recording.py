"""What the server measures and leaves of a run beside its rows: the evaluation set, the
partition report, the summary and its figure, and the titles they carry."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from fedpfn.core.cache import dataset_on, initial_model, partition_label_counts, validation_indices
from fedpfn.core.config import RunConfig
from fedpfn.core.data import CLASS_NAMES
from fedpfn.core.files import ACCURACY_FIGURE, PARTITION, PARTITION_FIGURE
from fedpfn.core.groups import Dirichlet
from fedpfn.core.hyper import flat_view
from fedpfn.core.training import evaluate, pick_device
from fedpfn.runtime.runfolder import RunFolder
from strategies.privacy import ACCOUNTANT

LAST_ROUNDS = 5  # the window of the summary's `last5_mean_accuracy`


def evaluation_set(cfg: RunConfig, device: torch.device) -> tuple[str, torch.Tensor, torch.Tensor]:
    """('test', the test split), or ('val', the held-out training samples) when tuning."""
    data = dataset_on(cfg, device)
    if cfg.evaluation.validation_fraction == 0:
        return "test", data.test_x, data.test_y
    held = validation_indices(cfg).to(data.train_x.device)
    return "val", data.train_x[held], data.train_y[held]


def start_scores(cfg: RunConfig) -> tuple[str, float, float]:
    """(split, loss, accuracy) of the start file itself (`--init`), before round 1 trains: round 0.

    metrics.jsonl holds rounds 1..n, so the header says it (and run.log keeps the header)."""
    device = pick_device()
    split, x, y = evaluation_set(cfg, device)
    loss, accuracy = evaluate(initial_model(cfg).to(device), x, y)
    return split, loss, accuracy


def write_partition_report(cfg: RunConfig, folder: RunFolder) -> None:
    """partition.json and partition.png: each client's label counts, as a new run starts."""
    from partitions.report import plot_partition, write_partition_json

    counts = partition_label_counts(cfg)
    write_partition_json(folder.path / PARTITION, counts)
    title = f"{cfg.federation.num_clients} clients, {split_text(cfg)} · seed {cfg.seed}"
    plot_partition(folder.path / PARTITION_FIGURE, counts, CLASS_NAMES.get(cfg.task.dataset), title)


def write_summary(cfg: RunConfig, folder: RunFolder, eval_name: str, wall_seconds: float) -> dict[str, Any]:
    """The run's figure and summary.json (written last: it marks the run finished) from its rows."""
    from fedpfn.analysis.plots import plot_run  # matplotlib only where a run ends, not in every client

    rows = folder.read_metrics()
    plot_run(rows, folder.path / ACCURACY_FIGURE, title=setting_title(cfg), config=flat_view(cfg.to_dict()))
    summary = summarise_rows(rows, eval_name)
    summary.update(algorithm=cfg.algorithm, server=cfg.server, wall_seconds=wall_seconds)
    folder.write_summary(summary)
    return summary


def summarise_rows(rows: list[dict[str, Any]], split: str = "test") -> dict[str, Any]:
    """The summary figures of a run's metrics rows (evaluated rounds only for accuracy)."""
    accuracy, loss = f"{split}_accuracy", f"{split}_loss"
    evaluated = [r for r in rows if r[accuracy] is not None]
    window = evaluated[-LAST_ROUNDS:]
    fractions = [r["anchored_fraction"] for r in rows if r.get("anchored_fraction") is not None]
    prefix = "" if split == "test" else f"{split}_"
    summary: dict[str, Any] = {
        "rounds": rows[-1]["round"],
        f"final_{split}_accuracy": rows[-1][accuracy],
        f"final_{split}_loss": rows[-1][loss],
        f"last5_mean_{prefix}accuracy": float(np.mean([r[accuracy] for r in window])),
        "last5_window": f"last {len(window)} of {len(evaluated)} evaluated rounds",
        "bytes_up_total": sum(r["bytes_up"] for r in rows),
        "bytes_down_total": sum(r["bytes_down"] for r in rows),
        "num_failures_total": sum(r["num_failures"] for r in rows),
    }
    if fractions:
        summary["anchored_fraction"] = float(np.mean(fractions))
    if rows[-1].get("dp_epsilon") is not None:  # a --server-wrap that adds noise: the budget spent
        summary.update(dp_epsilon=rows[-1]["dp_epsilon"], dp_delta=rows[-1]["dp_delta"], dp_accountant=ACCOUNTANT)
    return summary


def split_text(cfg: RunConfig) -> str:
    return f"Dirichlet α={cfg.partition.alpha:g}" if isinstance(cfg.partition, Dirichlet) else cfg.partition.method


def setting_title(cfg: RunConfig) -> str:
    """The run's setting in one line, for figure titles."""
    server = "" if cfg.server == "fedavg" else f" + {cfg.server}"
    return (
        f"{cfg.algorithm}{server} · {cfg.task.dataset} {cfg.task.model} · {cfg.federation.num_clients} clients "
        f"({cfg.federation.clients_per_round}/round), {split_text(cfg)} · seed {cfg.seed}"
    )
