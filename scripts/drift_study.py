#!/usr/bin/env python
"""The study behind docs/results.md: does shared anchoring help where clients drift, and does it
keep their models aligned?

    python scripts/drift_study.py all      # the learning-rate grid, the main runs, then the page (drift_page.py)
    python scripts/drift_study.py grid     # one stage: grid, main or page
    python scripts/drift_study.py all --model cnn --rounds 200 --grid-rounds 50   # the full design (a GPU)

The design was written into docs/results.md before any of its runs (`prereg`); every
run goes through run_sim.py into runs/drift/<model>/..., is skipped when finished and resumed
when killed, so the study can be stopped and continued. Learning rates are chosen per arm
and skew on a validation split held out of the training data (never the test set).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from fedpfn.core.files import CONFIG, METRICS, SUMMARY, read_jsonl  # noqa: E402

PYTHON = sys.executable
DESIGN = [
    "--dataset", "fmnist", "--num-clients", "100", "--clients-per-round", "10", "--partition", "dirichlet",
    "--local-epochs", "5", "--batch-size", "50", "--lr-decay", "0.99", "--momentum", "0.9",
    "--weight-decay", "5e-4", "--alignment-every", "10", "--checkpoint-every", "10",
]  # fmt: skip
ARMS = {  # arm -> its flags; the first is the baseline, `fedpfn-client` the control
    "fedavg": ["--algorithm", "fedavg"],
    "fedpfn": ["--algorithm", "fedpfn"],
    "fedpfn-fixed": ["--algorithm", "fedpfn", "--anchor-schedule", "fixed"],
    "fedpfn-client": ["--algorithm", "fedpfn", "--anchor-masks", "client"],
    "fedpnu-weight": ["--algorithm", "fedpnu", "--anchor-granularity", "weight"],
    "fedpnu-neuron": ["--algorithm", "fedpnu", "--anchor-granularity", "neuron"],
}
ALPHAS = ("0.1", "0.5")
SEEDS = (0, 1, 2, 3, 4)
LR_GRID = ("0.01", "0.02", "0.05", "0.1")
SCORED_ROUNDS = 10  # the grid scores a learning rate on the last 10 evaluated rounds
CHANCE = 0.2  # a grid run whose score is below this collapsed (chance is 0.1)
ROUNDS, GRID_ROUNDS = 100, 30  # this machine's version; the design: 200 and 50 (a GPU)


def run_once(out: Path, flags: list[str]) -> Path:
    """One run_sim.py run: skipped when finished, resumed when killed, started otherwise."""
    if (out / SUMMARY).exists():
        return out
    cmd = [PYTHON, "run_sim.py", "--resume", str(out)] if (out / CONFIG).exists() else [
        PYTHON, "run_sim.py", *flags, "--out", str(out)
    ]  # fmt: skip
    print("$", " ".join(cmd[1:]), flush=True)
    subprocess.run(cmd, cwd=ROOT, check=True)
    return out


class Study:
    """The design at one model and length: where its runs live and which learning rates won."""

    def __init__(self, model: str, rounds: int = ROUNDS, grid_rounds: int = GRID_ROUNDS) -> None:
        self.model, self.rounds, self.grid_rounds = model, rounds, grid_rounds
        self.runs = ROOT / "runs" / "drift" / model

    def grid_run(self, alpha: str, arm: str, lr: str) -> Path:
        return self.runs / "grid" / f"a{alpha}" / arm / f"lr{lr}"

    def main_run(self, alpha: str, arm: str, seed: int) -> Path:
        return self.runs / "main" / f"a{alpha}" / arm / f"s{seed}"

    def grid(self) -> None:
        tuning = ["--validation-fraction", "0.1", "--rounds", str(self.grid_rounds), "--seed", "0"]
        for alpha in ALPHAS:
            for arm, flags in ARMS.items():
                for lr in LR_GRID:
                    run_once(self.grid_run(alpha, arm, lr),
                             [*DESIGN, "--model", self.model, *flags, "--alpha", alpha, "--lr", lr, *tuning])

    def main(self) -> None:
        for alpha in ALPHAS:
            for arm, flags in ARMS.items():
                lr = self.chosen_lr(alpha, arm)
                for seed in SEEDS:
                    run_once(self.main_run(alpha, arm, seed), [
                        *DESIGN, "--model", self.model, *flags, "--alpha", alpha, "--lr", lr, "--seed", str(seed),
                        "--rounds", str(self.rounds),
                    ])  # fmt: skip

    def score(self, alpha: str, arm: str, lr: str) -> float | None:
        """Mean validation accuracy of a grid run's last SCORED_ROUNDS evaluated rounds (None: collapsed)."""
        run = self.grid_run(alpha, arm, lr)
        if not (run / SUMMARY).exists():
            raise SystemExit(f"drift_study: the grid run {run} is missing; run `python scripts/drift_study.py grid`")
        accs = [r["val_accuracy"] for r in read_jsonl(run / METRICS) if r.get("val_accuracy") is not None]
        score = sum(accs[-SCORED_ROUNDS:]) / len(accs[-SCORED_ROUNDS:])
        return None if score < CHANCE else score

    def chosen_lr(self, alpha: str, arm: str) -> str:
        return max(LR_GRID, key=lambda lr: self.score(alpha, arm, lr) or 0.0)

    def grid_table(self) -> dict[str, dict[str, dict[str, float | None]]]:
        """alpha -> arm -> lr -> score, for the page."""
        return {a: {arm: {lr: self.score(a, arm, lr) for lr in LR_GRID} for arm in ARMS} for a in ALPHAS}


def cli() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("stage", choices=("grid", "main", "page", "all"))
    parser.add_argument("--model", default="mlp", help="mlp (the 2-core machine's version) or cnn (the full design)")
    parser.add_argument("--rounds", type=int, default=ROUNDS, help="rounds of a main run (the design: 200)")
    parser.add_argument("--grid-rounds", type=int, default=GRID_ROUNDS, help="rounds of a grid run")
    args = parser.parse_args()
    study = Study(args.model, args.rounds, args.grid_rounds)
    if args.stage in ("grid", "all"):
        study.grid()
    if args.stage in ("main", "all"):
        study.main()
    if args.stage in ("page", "all"):  # drift_page.py imports this file: run it, do not import it
        subprocess.run([PYTHON, str(ROOT / "scripts" / "drift_page.py"), "--model", args.model], cwd=ROOT, check=True)
    print(json.dumps({"runs": str(study.runs)}))
    return 0


if __name__ == "__main__":
    sys.exit(cli())
