#!/usr/bin/env python
"""The study behind docs/results_earlier.md: does training-time alignment help federated learning here?

    python scripts/study.py all            # every phase, then the report (restartable)
    python scripts/study.py grid           # one phase: grid, main, schedule, servers, ratios, anchors
    python scripts/study.py report         # tables and figures from the finished runs

Fashion-MNIST, the paper's CNN, 20 clients with 10 a round, 30 rounds, 5 seeds. Every run
goes through `run_sim.py --compare`, which reuses finished runs and resumes killed ones, so
the study can be stopped and continued. Learning rates are chosen first, per algorithm and
skew, on a validation split held out from the training data (never the test set).
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from fedpfn.core.files import CONFIG, METRICS, SUMMARY  # noqa: E402
from fedpfn.core.flags import OneLineParser  # noqa: E402

RUNS = ROOT / "runs" / "study"
PYTHON = sys.executable

SETTING = [
    "--dataset", "fmnist", "--model", "cnn", "--num-clients", "20", "--clients-per-round", "10",
    "--partition", "dirichlet", "--local-epochs", "1", "--batch-size", "64", "--momentum", "0.9",
    "--weight-decay", "5e-4", "--checkpoint-every", "5",
]
ALPHAS = ("0.1", "0.5")
SEEDS = "0,1,2,3,4"
ROUNDS = "30"
ALGORITHMS = ("fedavg", "fedpfn", "fedpnu")
LR_GRID = ("0.01", "0.03", "0.1")
GRID_ROUNDS = "15"
GRID_SEEDS = "0"
SERVER_GRID = {"fedavgm": ("0.3", "1.0"), "fedadam": ("0.003", "0.01", "0.03")}
SERVER_ALPHA = "0.1"
RATIOS = ("0.2", "0.6")
ANCHOR_SEEDS = "0,1,2"


def compare(out: Path, algorithms: Sequence[str], *flags: str, seeds: str = SEEDS) -> Path:
    """One `run_sim.py --compare` (reusing what is finished); returns its folder."""
    cmd = [PYTHON, "run_sim.py", "--compare", ",".join(algorithms), "--seeds", seeds, *SETTING, *flags,
           "--out", str(out)]
    print("$", " ".join(cmd[1:]), flush=True)
    subprocess.run(cmd, cwd=ROOT, check=True)
    return out


def run_once(out: Path, *flags: str) -> Path:
    """One run: skipped when finished, resumed when killed, started otherwise."""
    if (out / SUMMARY).exists():
        return out
    if (out / CONFIG).exists():
        cmd = [PYTHON, "run_sim.py", "--resume", str(out)]
    else:
        cmd = [PYTHON, "run_sim.py", *SETTING, *flags, "--out", str(out)]
    print("$", " ".join(cmd[1:]), flush=True)
    subprocess.run(cmd, cwd=ROOT, check=True)
    return out


# --- phase 1: learning rates on a validation split ------------------------------------------

TUNING = ("--rounds", GRID_ROUNDS, "--validation-fraction", "0.1", "--eval-every", "3", "--seed", GRID_SEEDS)


def grid() -> None:
    for alpha in ALPHAS:
        for lr in LR_GRID:
            for algorithm in ALGORITHMS:
                run_once(RUNS / "grid" / f"a{alpha}" / f"lr{lr}" / f"{algorithm}-s{GRID_SEEDS}",
                         "--algorithm", algorithm, "--alpha", alpha, "--lr", lr, *TUNING)
    for server, lrs in SERVER_GRID.items():
        for server_lr in lrs:
            run_once(RUNS / "grid" / f"a{SERVER_ALPHA}" / f"{server}-slr{server_lr}" / f"fedavg-s{GRID_SEEDS}",
                     "--algorithm", "fedavg", "--alpha", SERVER_ALPHA, "--lr", chosen_lr("fedavg", SERVER_ALPHA),
                     "--server", server, "--server-lr", server_lr, *TUNING)


def _score(run: Path) -> float | None:
    """Mean validation accuracy of the last two evaluated rounds; None if the run diverged."""
    rows = [json.loads(line) for line in (run / METRICS).read_text().splitlines()]
    accs = [r["val_accuracy"] for r in rows if r.get("val_accuracy") is not None]
    score = sum(accs[-2:]) / len(accs[-2:])
    return None if score < 0.2 else score  # chance is 0.1: a collapsed run


def grid_scores() -> dict[str, dict]:
    """Every grid run's score, and the choice per (algorithm, alpha) and per server."""
    scores: dict[str, dict] = {}
    for run in sorted((RUNS / "grid").glob("a*/*/*-s*")):
        if (run / SUMMARY).exists():
            scores[str(run.relative_to(RUNS / "grid"))] = {"score": _score(run)}
    return scores


def chosen_lr(algorithm: str, alpha: str) -> str:
    best = max(LR_GRID, key=lambda lr: _score_of(f"a{alpha}/lr{lr}/{algorithm}-s{GRID_SEEDS}") or 0.0)
    return best


def chosen_server_lr(server: str) -> str:
    return max(SERVER_GRID[server],
               key=lambda slr: _score_of(f"a{SERVER_ALPHA}/{server}-slr{slr}/fedavg-s{GRID_SEEDS}") or 0.0)


def _score_of(relative: str) -> float | None:
    run = RUNS / "grid" / relative
    if not (run / SUMMARY).exists():
        raise SystemExit(f"study: the grid run {run} is missing; run `python scripts/study.py grid` first")
    return _score(run)


# --- phases 2-5: the comparisons, at the chosen learning rates --------------------------------


def main_comparison() -> None:
    for alpha in ALPHAS:
        for algorithm in ALGORITHMS:
            compare(RUNS / f"main-a{alpha}" / algorithm, [algorithm], "--alpha", alpha,
                    "--lr", chosen_lr(algorithm, alpha), "--rounds", ROUNDS)


def schedule() -> None:
    compare(RUNS / f"main-a{SERVER_ALPHA}" / "fedpfn-fixed", ["fedpfn"], "--alpha", SERVER_ALPHA,
            "--lr", chosen_lr("fedpfn", SERVER_ALPHA), "--anchor-schedule", "fixed", "--rounds", ROUNDS)


def servers() -> None:
    for server in SERVER_GRID:
        for algorithm in ("fedavg", "fedpfn"):
            compare(RUNS / f"servers-a{SERVER_ALPHA}" / f"{algorithm}-{server}", [algorithm],
                    "--alpha", SERVER_ALPHA, "--lr", chosen_lr(algorithm, SERVER_ALPHA),
                    "--server", server, "--server-lr", chosen_server_lr(server), "--rounds", ROUNDS)


def ratios() -> None:
    for ratio in RATIOS:
        compare(RUNS / f"main-a{SERVER_ALPHA}" / f"fedpnu-r{ratio}", ["fedpnu"], "--alpha", SERVER_ALPHA,
                "--lr", chosen_lr("fedpnu", SERVER_ALPHA), "--anchor-ratio", ratio, "--rounds", ROUNDS)


def anchors_under_servers() -> None:
    """Issue 11's variants: FedPFN's anchored entries under FedAvgM and FedAdam (the MLP, 3 seeds)."""
    for server, server_lr in (("fedavgm", "1.0"), ("fedadam", "0.01")):
        base = ["--model", "mlp", "--alpha", "0.1", "--lr", "0.05", "--server", server, "--server-lr", server_lr,
                "--rounds", "20"]
        out = RUNS / "anchors-server" / server
        compare(out / "plain", ["fedavg"], *base, seeds=ANCHOR_SEEDS)
        compare(out / "round-keep", ["fedpfn"], *base, seeds=ANCHOR_SEEDS)
        compare(out / "round-reset", ["fedpfn"], *base, "--anchor-server-step", "reset", seeds=ANCHOR_SEEDS)
        compare(out / "fixed", ["fedpfn"], *base, "--anchor-schedule", "fixed", seeds=ANCHOR_SEEDS)


PHASES = {
    "grid": grid,
    "main": main_comparison,
    "schedule": schedule,
    "servers": servers,
    "ratios": ratios,
    "anchors": anchors_under_servers,
}


def report() -> None:
    subprocess.run([PYTHON, "scripts/study_report.py"], cwd=ROOT, check=True)


def cli(argv: list[str] | None = None) -> int:
    parser = OneLineParser(prog="study.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("phase", choices=[*PHASES, "report", "all"])
    args = parser.parse_args(argv)
    for name, phase in PHASES.items():
        if args.phase in (name, "all"):
            phase()
    if args.phase in ("report", "all"):
        report()
    return 0


if __name__ == "__main__":
    sys.exit(cli())
