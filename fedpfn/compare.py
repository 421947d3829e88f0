"""Compare algorithms on the same partitions and seeds, in one folder.

    python run_sim.py --compare fedavg,fedprox,fedpfn,fedpnu --seeds 0,1,2 --out runs/cmp

Each (algorithm, seed) is an ordinary run folder under the comparison folder; a finished
one is reused and a killed one resumed, so a long comparison can be restarted. The
partition depends only on the seed and the federation settings, never on the algorithm.
"""

from __future__ import annotations

import csv
import dataclasses
import json
from pathlib import Path
from typing import Any

import numpy as np

from fedpfn.config import ConfigError, RunConfig
from fedpfn.plots import plot_comparison
from fedpfn.results import RunFolder
from fedpfn.simulation import simulate

LAST_ROUNDS = 5


def parse_list(text: str, name: str, kind: type = str) -> list:
    items = [item.strip() for item in str(text).split(",") if item.strip()]
    if not items:
        raise ConfigError(f"{name}: '{text}' is empty; give a comma-separated list")
    try:
        return [kind(item) for item in items]
    except ValueError:
        raise ConfigError(f"{name}: '{text}' must be a comma-separated list of {kind.__name__}s") from None


def comparison_configs(base: RunConfig, algorithms: list[str], seeds: list[int]) -> list[RunConfig]:
    """One validated config per (algorithm, seed); every problem reported at once."""
    root = base.run_dir
    configs, problems = [], []
    for algorithm in algorithms:
        for seed in seeds:
            cfg = dataclasses.replace(base, algorithm=algorithm, seed=seed, out=str(root / f"{algorithm}-s{seed}"))
            problems += [p for p in cfg.problems() if p not in problems]
            configs.append(cfg)
    if problems:
        raise ConfigError("\n".join(problems))
    return configs


def run_one(cfg: RunConfig) -> None:
    folder = RunFolder(cfg.run_dir)
    if folder.is_finished():
        print(f"{cfg.run_dir}: finished earlier, reused")
        return
    resumable = folder.holds_run() and folder.load_checkpoint() is not None
    print(f"== {cfg.algorithm} seed {cfg.seed}" + (" (resumed)" if resumable else ""), flush=True)
    if resumable:
        simulate(folder.load_config(), resume=True)
    else:  # new, or killed before its first checkpoint: start it (again)
        simulate(dataclasses.replace(cfg, overwrite=True))


def rounds_to_target(rows: list[dict[str, Any]], target: float) -> int | None:
    return next((r["round"] for r in rows if r["test_accuracy"] >= target), None)


def summarise(configs: list[RunConfig], target: float) -> list[dict[str, Any]]:
    """One row per algorithm: mean and spread over seeds."""
    table = []
    for algorithm in dict.fromkeys(c.algorithm for c in configs):
        runs = [RunFolder(c.run_dir).read_metrics() for c in configs if c.algorithm == algorithm]
        last = [np.mean([r["test_accuracy"] for r in rows[-LAST_ROUNDS:]]) for rows in runs]
        reach = [rounds_to_target(rows, target) for rows in runs]
        reached = [r for r in reach if r is not None]
        table.append(
            {
                "algorithm": algorithm,
                "seeds": len(runs),
                "last5_acc_mean": float(np.mean(last)),
                "last5_acc_std": float(np.std(last)),
                "rounds_to_target": float(np.mean(reached)) if len(reached) == len(reach) else None,
                "reached_target": f"{len(reached)}/{len(reach)}",
                "mb_up_per_round": float(np.mean([np.mean([r["bytes_up"] for r in rows]) for rows in runs]) / 1e6),
                "mb_up_total": float(np.mean([sum(r["bytes_up"] for r in rows) for rows in runs]) / 1e6),
            }
        )
    return table


def write_table(table: list[dict[str, Any]], root: Path, target: float, command: str) -> None:
    with open(root / "comparison.csv", "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(table[0]))
        writer.writeheader()
        writer.writerows(table)
    lines = [
        f"Command: `{command}`",
        "",
        f"| algorithm | last-{LAST_ROUNDS} accuracy (mean ± std over seeds) | rounds to {target:.0%} "
        "| MB up per round | MB up in total |",
        "|---|---|---|---|---|",
    ]
    for row in table:
        reach = f"{row['rounds_to_target']:.1f}" if row["rounds_to_target"] is not None else f"not reached ({row['reached_target']})"
        lines.append(
            f"| {row['algorithm']} | {row['last5_acc_mean']:.4f} ± {row['last5_acc_std']:.4f} | {reach} "
            f"| {row['mb_up_per_round']:.2f} | {row['mb_up_total']:.1f} |"
        )
    (root / "comparison.md").write_text("\n".join(lines) + "\n")


def compare(base: RunConfig, algorithms: list[str], seeds: list[int], command: str) -> list[dict[str, Any]]:
    configs = comparison_configs(base, algorithms, seeds)
    root = base.run_dir
    root.mkdir(parents=True, exist_ok=True)
    (root / "comparison_config.json").write_text(
        json.dumps({"base": base.to_dict(), "algorithms": algorithms, "seeds": seeds}, indent=2)
    )
    for cfg in configs:
        run_one(cfg)
    table = summarise(configs, base.target_accuracy)
    write_table(table, root, base.target_accuracy, command)
    curves = {
        algorithm: [RunFolder(c.run_dir).read_metrics() for c in configs if c.algorithm == algorithm]
        for algorithm in algorithms
    }
    plot_comparison(curves, root / "comparison.png")
    return table
