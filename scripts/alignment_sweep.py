#!/usr/bin/env python
"""The alignment gate's sweep behind docs/alignment.md: in which regime is there permutation
misalignment from a shared start (P(plain) > 0), and there, do shared anchors remove it?

    nice -n 10 python scripts/alignment_sweep.py              # every regime's cells, in order
    python scripts/alignment_sweep.py --regime cnn-same-init --seeds 5-9   # more seeds of one
    python scripts/alignment_sweep.py --list                  # the regimes and their settings

A cell is one regime and one seed: `python -m fedpfn.analysis.lmc` with every arm (plain, one
shared mask, independent masks, different initialisations) into runs/alignment/<regime>/seed<k>.
A finished cell is skipped; a cell whose lmc.json holds other settings is refused, never reused
or overwritten; a killed cell leaves no lmc.json and is run again. So the sweep can be stopped
and continued, and a device that runs out of time still brings its finished cells back. The regimes
and the flags they share are fedpfn/study/gate_grid.py's, where the page reads them too.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from fedpfn.study.gate_grid import COMMON, OUT, REGIMES  # noqa: E402  (the gate's grid)


def cell_flags(regime: str, seed: int) -> list[str]:
    return [*COMMON, *REGIMES[regime], "--seeds", str(seed), "--threads", "1"]


def expected_config(regime: str, seed: int) -> dict:
    """The config lmc.json must hold for this cell, read off the command's own parser and checks."""
    from dataclasses import asdict

    from fedpfn.analysis.lmc import build_parser, read_config

    args = vars(build_parser().parse_args([*cell_flags(regime, seed), "--out", "x"]))
    args.pop("out")
    cfg, problems = read_config(args)
    if problems:
        raise SystemExit(f"error: regime {regime}: {problems[0]}")
    return json.loads(json.dumps(asdict(cfg)))


def finished(folder: Path, regime: str, seed: int) -> bool:
    """True when the cell's lmc.json exists with this cell's settings; exit 2 when its settings differ."""
    result = folder / "lmc.json"
    if not result.is_file():
        return False
    from fedpfn.analysis.lmc import LmcConfig
    from fedpfn.core.anchors import scope_filled

    saved = scope_filled(json.loads(result.read_text())["config"], LmcConfig)  # a cell from before the scope: defaults
    wanted = expected_config(regime, seed)
    differing = sorted(k for k in wanted if saved.get(k) != wanted[k])
    if differing:
        raise SystemExit(f"error: {result} holds other settings ({', '.join(differing)}); move it away to rerun")
    return True


def run_cell(regime: str, seed: int) -> float:
    """One cell, unless finished; its wall seconds (0 when skipped)."""
    folder = OUT / regime / f"seed{seed}"
    if finished(folder, regime, seed):
        return 0.0
    started = time.perf_counter()
    command = [sys.executable, "-m", "fedpfn.analysis.lmc", *cell_flags(regime, seed), "--out", str(folder)]
    with open(OUT / f"{regime}.log", "a") as log:
        done = subprocess.run(command, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, check=False)
    if done.returncode:
        raise SystemExit(f"error: {regime} seed {seed} failed (exit {done.returncode}); see {OUT / regime}.log")
    return time.perf_counter() - started


def seeds_from(text: str) -> list[int]:
    """'0-4' or '0,3,5': the seeds a run covers."""
    try:
        if "-" in text:
            low, high = (int(v) for v in text.split("-"))
            return list(range(low, high + 1))
        return [int(v) for v in text.split(",")]
    except ValueError:
        raise SystemExit(f"error: --seeds {text!r}: give a range like 0-9 or a list like 0,3,5") from None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--regime", action="append", choices=list(REGIMES), help="only these regimes (repeatable)")
    parser.add_argument("--seeds", default="0-4", help="seeds of each regime: 0-9 or 0,3,5 (default 0-4)")
    parser.add_argument("--list", action="store_true", help="print the regimes and their flags, run nothing")
    args = parser.parse_args(argv)
    if args.list:
        for name, flags in REGIMES.items():
            print(f"{name}: {' '.join(flags)}")
        return 0
    seeds = seeds_from(args.seeds)
    OUT.mkdir(parents=True, exist_ok=True)
    for regime in args.regime or list(REGIMES):
        for seed in seeds:
            seconds = run_cell(regime, seed)
            print(f"{regime} seed {seed}: {'done earlier' if not seconds else f'{seconds:.0f} s'}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
