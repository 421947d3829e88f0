#!/usr/bin/env python
"""Write docs/guide/attacks-results.md from its runs: FedAvg's mean against Flower's robust
aggregators (Krum, MultiKrum, Bulyan, FedMedian, FedTrimmedAvg), each under FedAvg's client rule
and under FedPFN's anchors, with a seeded 10 % and 30 % of the clients sending their update
reversed four times over (`--attack sign-flip --attack-scale 4`), over 3 seeds.

    nice python scripts/attack_page.py                  # the runs (about half an hour on 2 CPU cores), then the page
    nice python scripts/attack_page.py --out runs/attack-page
    nice python scripts/attack_page.py --only fedpfn    # one client side's runs alone (two at once), no page

A run whose folder already holds its summary.json is read, not run again (so an interrupted
script continues where it stopped); every number on the page comes from a run folder, and the
page names the command of each arm.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from fedpfn.analysis.stats import paired  # noqa: E402  (the project's paired statistics)
from fedpfn.cli.simulate import checked_config, parse_args  # noqa: E402  (fedpfn run's own flags)
from fedpfn.core.files import SUMMARY  # noqa: E402  (the run folder's names, from their one place)
from fedpfn.runtime.compare import ensure_run  # noqa: E402  (reuse, resume or start: one primitive)

PAGE = ROOT / "docs" / "guide" / "attacks-results.md"
FLOWER = "flwr.serverapp.strategy:"
PER_ROUND, SCALE, SEEDS = 10, 4, (0, 1, 2)
SETTINGS = ["--dataset", "fmnist", "--model", "mlp", "--num-clients", "20", "--clients-per-round", str(PER_ROUND),
            "--rounds", "5", "--eval-every", "5", "--partition", "iid", "--batch-size", "200", "--engine-mode", "threads",
            "--attack", "sign-flip",
            "--attack-scale", str(SCALE)]  # fmt: skip
SERVERS = ("fedavg", "Krum", "MultiKrum", "Bulyan", "FedMedian", "FedTrimmedAvg")
FRACTIONS = (0.1, 0.3)
ALGORITHMS = ("fedavg", "fedpfn")


def server_args(server: str, fraction: float) -> dict[str, float] | None:
    """What each aggregator is told of the attackers: f = fraction x clients a round (Bulyan takes
    at most 1 of 10 replies: it needs 4f + 3 of them); FedTrimmedAvg trims that fraction each side."""
    f = round(fraction * PER_ROUND)
    return {
        "Krum": {"num_malicious_nodes": f},
        "MultiKrum": {"num_malicious_nodes": f, "num_nodes_to_select": PER_ROUND - f},
        "Bulyan": {"num_malicious_nodes": min(f, (PER_ROUND - 3) // 4)},
        "FedTrimmedAvg": {"beta": fraction},
    }.get(server)


def arm_flags(algorithm: str, server: str, fraction: float) -> list[str]:
    flags = ["--algorithm", algorithm, "--server", server if server == "fedavg" else FLOWER + server, *SETTINGS]
    args = server_args(server, fraction)
    return flags + ["--attack-fraction", str(fraction)] + (["--server-args", json.dumps(args)] if args else [])


def run_arm(out: Path, algorithm: str, server: str, fraction: float) -> tuple[dict[int, float], list[str]]:
    """The arm's final test accuracy by seed (each seed run now unless finished) and its command."""
    accuracy = {}
    for seed in SEEDS:
        folder = out / f"{algorithm}-{server}-f{fraction}-s{seed}"
        command = ["fedpfn", "run", *arm_flags(algorithm, server, fraction), "--seed", str(seed), "--out"]
        ensure_run(checked_config(parse_args([*command[2:], str(folder)])))  # reused only with its settings
        accuracy[seed] = json.loads((folder / SUMMARY).read_text())["final_test_accuracy"]
    shown = out.relative_to(ROOT) if out.is_relative_to(ROOT) else out
    return accuracy, [*command[:-3], "--seed", "0", "--out", f"{shown}/{algorithm}-{server}-f{fraction}-s0"]


def percent_interval(mean: float, low: float | None, high: float | None) -> str:
    return f"{100 * mean:.1f} [{100 * low:.1f}, {100 * high:.1f}]" if low is not None and high is not None else f"{100 * mean:.1f}"


def row(arm: dict[int, float], base: dict[int, float], server: str, command: list[str]) -> str:
    """Accuracy with its 95 % t interval over seeds (the paired interval against zero), and the
    paired difference from FedAvg's mean on the same seeds (one seed fixes the partition, the
    sampling and the attackers)."""
    level = paired(server, "final", arm, {seed: 0.0 for seed in arm})
    diff = paired(server, "final", arm, base)
    versus = "—" if server == "fedavg" else percent_interval(diff.mean, diff.low, diff.high)
    return f"| {server} | {percent_interval(level.mean, level.low, level.high)} | {versus} | `{shlex.join(command)}` |"


def section(algorithm: str, fraction: float, rows: list[str]) -> list[str]:
    client = "FedAvg's client rule" if algorithm == "fedavg" else "FedPFN's anchors (`--algorithm fedpfn`)"
    return [
        f"## {client}, {round(100 * fraction)} % malicious",
        "",
        "| server | final test accuracy, % [95 % CI] | minus server fedavg's, points [95 % CI] | command (seed 0; 1 and 2 likewise) |",
        "|---|---|---|---|",
        *rows,
        "",
    ]


def page(sections: list[str]) -> str:
    return "\n".join([
        "# Attack results: robust aggregation against sign flips",
        "",
        "Written by `python scripts/attack_page.py` from its runs (do not edit by hand). Fashion-MNIST,",
        f"the MLP (batch 200), 20 clients with IID data, {PER_ROUND} a round, 5 rounds, seeds 0, 1 and 2. A seeded",
        f"fraction of the clients sends g − {SCALE}·(w − g) instead of its trained model w",
        f"(`--attack sign-flip --attack-scale {SCALE}`, [Simulated attacks](attacks.md)): at 30 % the",
        "mean of a round's replies moves against the honest clients' update. Each aggregator is told",
        f"f = fraction × {PER_ROUND} attackers a round (Bulyan at most 1: it needs 4f + 3 replies);",
        "FedTrimmedAvg trims that fraction each side. Intervals are Student's t over the 3 seeds; the",
        "difference from FedAvg is paired by seed (fedpfn/analysis/stats.py). Three seeds make wide",
        "intervals: a difference whose interval excludes 0 is one these runs show, the others are not",
        "settled.",
        "",
        *sections,
    ])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "runs" / "attack-page", help="where the runs go")
    parser.add_argument("--only", choices=ALGORITHMS, help="run this client side's arms alone, and write no page")
    args = parser.parse_args(argv)
    sections: list[str] = []
    for algorithm in [args.only] if args.only else ALGORITHMS:
        for fraction in FRACTIONS:
            arms = {server: run_arm(args.out, algorithm, server, fraction) for server in SERVERS}
            base = arms["fedavg"][0]
            sections += section(algorithm, fraction, [row(acc, base, s, cmd) for s, (acc, cmd) in arms.items()])
    if args.only:
        return 0
    PAGE.write_text(page(sections))
    print(f"wrote {PAGE.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
