#!/usr/bin/env python
"""Same command, same numbers, measured: one `fedpfn run` command N times beside a busy process
and N times pinned to one core, each run's metrics.jsonl hashed without its clock field.

    python benchmarks/same_numbers.py            # the reliability issue's command, 6 + 6 runs
    python benchmarks/same_numbers.py --times 2 -- --rounds 1

Prints one line per run (its sha256 prefix and final test accuracy) and exits 1 unless every
hash is the same. tests/integration/test_same_numbers.py checks the same property on a smaller run.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
import tempfile
from pathlib import Path

COMMAND = ["--dataset", "fmnist", "--seed", "0", "--model", "mlp", "--num-clients", "20", "--clients-per-round", "5",
           "--rounds", "2", "--local-epochs", "3", "--lr", "0.1", "--momentum", "0.9", "--partition", "dirichlet",
           "--alpha", "0.5"]  # fmt: skip
CLOCK = ("seconds",)


def digest(out: Path) -> tuple[str, float]:
    """The run's metrics.jsonl less its clock fields, hashed; and its final test accuracy."""
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    text = "\n".join(json.dumps({k: v for k, v in r.items() if k not in CLOCK}, sort_keys=True) for r in rows)
    return hashlib.sha256(text.encode()).hexdigest()[:16], rows[-1]["test_accuracy"]


def run(out: Path, flags: list[str], prefix: list[str]) -> tuple[str, float]:
    fedpfn = str(Path(sys.executable).with_name("fedpfn"))
    subprocess.run([*prefix, fedpfn, "run", *flags, "--out", str(out)], check=True, capture_output=True)
    return digest(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--times", type=int, default=6, help="runs under each condition (default 6)")
    parser.add_argument("flags", nargs="*", help="after --: flags that replace the default command's")
    args = parser.parse_args(argv)
    flags = args.flags or COMMAND
    seen = set()
    with tempfile.TemporaryDirectory(prefix="fedpfn-same-") as scratch:
        busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
        try:
            for k in range(args.times):
                seen.add(report(f"busy-{k + 1}", run(Path(scratch) / f"b{k}", flags, [])))
        finally:
            busy.kill()
        for k in range(args.times):
            seen.add(report(f"one-core-{k + 1}", run(Path(scratch) / f"c{k}", flags, ["taskset", "-c", "0"])))
    print("the same numbers in every run" if len(seen) == 1 else f"{len(seen)} different results")
    return 0 if len(seen) == 1 else 1


def report(name: str, result: tuple[str, float]) -> str:
    print(f"{name}: {result[0]} final test accuracy {100 * result[1]:.2f} %", flush=True)
    return result[0]


if __name__ == "__main__":
    sys.exit(main())
