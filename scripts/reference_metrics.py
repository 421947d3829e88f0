#!/usr/bin/env python
"""Fixed-seed reference runs: a refactor that claims "numbers unchanged" is checked with this.

    python scripts/reference_metrics.py OUT_DIR            # run every reference config
    python scripts/reference_metrics.py OUT_DIR --compare OTHER_DIR
    python scripts/reference_metrics.py OUT_DIR --compare RAY_DIR --engine batched --run-args "--engine-mode threads"

Each config runs through the real command line (by default on the Ray engine) on a tiny
setting (the MLP, and one run each of the CNN and ResNet-20); the per-round test accuracy
and loss are printed with full precision, and `--compare` reports which runs differ from an
earlier set, round by round.
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from fedpfn.core.files import METRICS, SUMMARY  # noqa: E402

COMMON = [
    "--dataset", "fmnist", "--model", "mlp", "--num-clients", "4", "--clients-per-round", "2",
    "--rounds", "3", "--partition", "dirichlet", "--alpha", "0.5", "--seed", "7",
]
REFERENCES = {
    "fedavg": [],
    "fedprox": ["--algorithm", "fedprox"],
    "scaffold": ["--algorithm", "scaffold"],
    "feddyn": ["--algorithm", "feddyn"],
    "fedpfn": ["--algorithm", "fedpfn"],
    "fedpnu": ["--algorithm", "fedpnu"],
    "fedpfn+scaffold": ["--algorithm", "fedpfn+scaffold"],
    "moon": ["--algorithm", "moon"],
    # the paper's CNN, and a BatchNorm model (buffers, 0-d counters) on smaller partitions
    "cnn-fedpfn+fedprox": ["--algorithm", "fedpfn+fedprox", "--model", "cnn", "--num-clients", "20"],
    "resnet20-fedpnu+feddyn": [
        "--algorithm", "fedpnu+feddyn", "--model", "resnet20", "--num-clients", "60", "--batch-size", "128",
    ],
}


def run_all(out: Path, engine: str, run_args: list[str]) -> None:
    for name, extra in REFERENCES.items():
        folder = out / name
        if (folder / SUMMARY).exists():
            continue
        cmd = [sys.executable, str(ROOT / "run_sim.py"), *COMMON, *extra, "--engine", engine, *run_args, "--out", str(folder)]
        subprocess.run(cmd, check=True, cwd=ROOT, stdout=subprocess.DEVNULL)


def curves(out: Path) -> dict[str, list[tuple[float, float]]]:
    found = {}
    for name in REFERENCES:
        rows = [json.loads(line) for line in (out / name / METRICS).read_text().splitlines()]
        found[name] = [(row["test_accuracy"], row["test_loss"]) for row in rows]
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--compare", type=Path, help="an earlier OUT_DIR to compare with")
    parser.add_argument("--engine", default="ray", choices=("ray", "batched"), help="the engine (default: ray)")
    parser.add_argument("--run-args", default="", help="more run_sim.py flags for every run")
    args = parser.parse_args()
    run_all(args.out, args.engine, shlex.split(args.run_args))
    now = curves(args.out)
    for name, rows in now.items():
        print(f"{name:>16}: " + "  ".join(f"{100 * acc:.2f} %/{loss:.17g}" for acc, loss in rows))  # accuracy in %, as the pages
    if args.compare is None:
        return 0
    before = curves(args.compare)
    changed = [name for name in now if now[name] != before[name]]
    print("identical to", args.compare, "bit for bit" if not changed else f"except: {', '.join(changed)}")
    return 1 if changed else 0


if __name__ == "__main__":
    sys.exit(main())
