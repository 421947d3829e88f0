"""How long a study's cell takes: one cell on its own, and two side by side, each held to one core
as `fedpfn study run --jobs 2` holds them (fedpfn.runtime.resources.core_shares).

    .venv/bin/python benchmarks/bench_cell.py              # the confirmatory MLP study's cell, 3 repeats
    .venv/bin/python benchmarks/bench_cell.py --repeats 5

Each run is `fedpfn run` as a process of its own, timed from launch to exit (start-up included);
the two ways alternate, and each figure is the median of the repeats. The cell is the one the
studies guide (docs/guide/studies.md) quotes.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import report

FEDPFN = str(Path(sys.executable).with_name("fedpfn"))
CELL = [
    "run", "--dataset", "fmnist", "--model", "mlp", "--num-clients", "20", "--clients-per-round", "5",
    "--partition", "dirichlet", "--alpha", "0.1", "--rounds", "10", "--local-epochs", "3", "--batch-size", "64",
    "--lr", "0.03", "--momentum", "0.9", "--weight-decay", "5e-4", "--local-test-fraction", "0.2",
    "--alignment-every", "5", "--alignment-clients", "2", "--algorithm", "fedpfn",
]  # fmt: skip


def cell(seed: int, out: Path, core: int | None) -> subprocess.Popen:
    """One cell's `fedpfn run`, on `core` alone where given (the share --jobs gives it)."""
    pinned = (lambda: os.sched_setaffinity(0, {core})) if core is not None else None
    command = [FEDPFN, *CELL, "--seed", str(seed), "--out", str(out), "--overwrite"]
    return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, preexec_fn=pinned)


def timed(cells: list[subprocess.Popen]) -> float:
    """Seconds until every cell has exited (each must succeed)."""
    began = time.perf_counter()
    for process in cells:
        _, err = process.communicate()
        if process.returncode != 0:
            raise SystemExit(f"a cell failed (exit {process.returncode}): {err.decode()[-500:]}")
    return time.perf_counter() - began


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    if args.repeats < 1:
        ap.error(f"--repeats {args.repeats}: give 1 or more")
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < 2:
        ap.error(f"this process may use {len(cores)} core; two cells side by side need 2")
    report.print_header("bench_cell: a study cell alone, and two side by side on a core each", vars(args))
    alone, pair = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for k in range(args.repeats):
            began = time.perf_counter()
            alone.append(timed([cell(5, Path(tmp) / "alone", None)]))
            pair.append(timed([cell(5, Path(tmp) / "a", cores[0]), cell(6, Path(tmp) / "b", cores[1])]))
            print(f"  repeat {k + 1}: alone {alone[-1]:.1f} s, two side by side {pair[-1]:.1f} s "
                  f"({time.perf_counter() - began:.0f} s)", flush=True)  # fmt: skip
    a, p = statistics.median(alone), statistics.median(pair)
    print(f"one cell alone: {a:.1f} s (median of {args.repeats}); two side by side, a core each: {p:.1f} s, "
          f"{p / 2:.1f} s a cell")  # fmt: skip
    print(f"load average at end: {report.load_average()}")


if __name__ == "__main__":
    main()
