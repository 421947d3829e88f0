#!/usr/bin/env python
"""The gate's GPU regimes (studies/alignment_gate/alignment_gate_gpu.toml) in one command on the GPU machine.

    python scripts/gpu_gate.py --prepare        # here: the real Fashion-MNIST files into runs/gpu-data
    python scripts/gpu_gate.py --budget 540     # there, in one device run that carries runs/gpu-data

There the device has torch but neither flwr nor ray, and `python -m fedpfn.experiments.lmc` needs
neither, so this script reads the study file itself (fedpfn.study imports flwr) and runs each
missing cell with the study's own command line (`cells`; tests/studies/test_gpu_gate.py holds it equal to
fedpfn.study's), seed by seed across the regimes, each under what is left of the budget. A cell
that finishes is copied under $OUT at once, so a run cut short brings back every finished cell;
copied back under runs/, `fedpfn study status studies/alignment_gate/alignment_gate_gpu.toml` reads them. It
refuses to start without a CUDA device: on the CPU these cells take hours.
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import subprocess
import sys
import time
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STUDY = ROOT / "studies" / "alignment_gate" / "alignment_gate_gpu.toml"
DEBIAN = Path("/usr/share/datasets/fashion-mnist")
DEFAULTS = ("--threads", "1")  # fedpfn.study.result_cells.DEFAULTS: a cell's command line starts with them


def cells(study: Path = STUDY) -> list[tuple[str, int, Path, list[str]]]:
    """(regime, seed, folder, argv) of every cell, seed by seed across the regimes."""
    spec = tomllib.loads(study.read_text())
    shared = shlex.split(spec["shared"])
    return [(arm, seed, Path(spec["runs"]) / spec["cell"].format(arm=arm, seed=seed),
             [*DEFAULTS, *shared, *shlex.split(flags), "--seeds", str(seed),
              "--out", str(Path(spec["runs"]) / spec["cell"].format(arm=arm, seed=seed))])
            for seed in spec["seeds"] for arm, flags in spec["arms"].items()]  # fmt: skip


def prepare() -> int:
    """The four Fashion-MNIST files into runs/gpu-data, the folder the study's --data-root names."""
    target = ROOT / "runs" / "gpu-data"
    target.mkdir(parents=True, exist_ok=True)
    found = sorted(DEBIAN.glob("*-ubyte.gz"))
    if len(found) != 4:
        print(f"error: {DEBIAN} lacks the four Fashion-MNIST files (apt-get install dataset-fashion-mnist)", file=sys.stderr)
        return 2
    for path in found:
        shutil.copy(path, target / path.name)
    print(f"wrote {target.relative_to(ROOT)}: carry it in the device run (not .device: lmc needs no flwr or ray)")
    return 0


def run_cell(arm: str, seed: int, folder: Path, argv: list[str], left: float) -> str:
    """One cell, killed at `left` seconds; what a killed cell left is replaced (--overwrite), as the study runner does."""
    from fedpfn.experiments.lmc_render import OUTPUT_FILES

    again = ["--overwrite"] if any((ROOT / folder / name).is_file() for name in OUTPUT_FILES) else []
    start = time.monotonic()
    try:
        code: object = subprocess.run([sys.executable, "-m", "fedpfn.experiments.lmc", *argv, *again], cwd=ROOT,
                                      timeout=left, check=False).returncode  # fmt: skip
    except subprocess.TimeoutExpired:
        code = "none, stopped at the budget"
    return f"{arm} seed {seed}: exit {code}, {time.monotonic() - start:.0f} s"


def run(budget: float, out: Path) -> int:
    """Every cell without its lmc.json, each under what is left of `budget` seconds; a table last."""
    import torch

    if not torch.cuda.is_available():
        print("error: no CUDA device: these cells are for the GPU machine", file=sys.stderr)
        return 2
    end, rows = time.monotonic() + budget, []
    for arm, seed, folder, argv in cells():
        left = end - time.monotonic()
        if not (ROOT / folder / "lmc.json").is_file() and left > 30:
            rows.append(run_cell(arm, seed, folder, argv, left))
        if (ROOT / folder / "lmc.json").is_file():  # back under $OUT as soon as it is finished
            shutil.copytree(ROOT / folder, out / folder, dirs_exist_ok=True)
    print("\n".join(["", "cells run here:", *rows] if rows else ["", "no cell run: every cell finished, or no time left"]))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prepare", action="store_true", help="copy the real Fashion-MNIST files into runs/gpu-data")
    parser.add_argument("--budget", type=float, default=540, help="seconds for every cell together (default 540)")
    args = parser.parse_args(argv)
    if args.prepare:
        return prepare()
    return run(args.budget, Path(os.environ.get("OUT", ROOT / "runs" / "gpu-out")))


if __name__ == "__main__":
    sys.exit(main())
