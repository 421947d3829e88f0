#!/usr/bin/env python
"""The alignment pilot whose rule is docs/alignment_pilot.md: where a round's clients misalign.

    nohup nice -n 19 python scripts/alignment_pilot.py run >> runs/alignment-pilot/log.txt 2>&1 &
    python scripts/alignment_pilot.py run --only r24 --lr 0.1   # one block (a regime, a learning rate)
    python scripts/alignment_pilot.py page            # the results, below the page's marker
    python scripts/alignment_pilot.py page --stored   # the same from docs/alignment/pilot.json alone

Every federated cell goes through fedpfn.runtime.compare.ensure_run (reused when finished with the
same settings, resumed when killed); the positive control is `python -m fedpfn.analysis.lmc`'s
diff-init arm, run once per regime and lr unless its lmc.json exists. The grid, the page's figures
and the pick are fedpfn/study/pilot.py's; this script runs the cells.
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from fedpfn.study import pilot  # noqa: E402  (the grid, and the page)

TRAIN_SAMPLES = 60_000  # Fashion-MNIST's training set, split over the clients
ROUNDS = 5  # the trained round is the last
DESIGN = [
    "--dataset", "fmnist", "--model", "mlp", "--clients-per-round", "5", "--partition", "dirichlet",
    "--alpha", "0.5", "--rounds", str(ROUNDS), "--batch-size", "64", "--momentum", "0.9", "--weight-decay", "5e-4",
    "--local-test-fraction", "0.2", "--alignment-every", "1", "--alignment-clients", "5", "--engine", "batched",
]  # fmt: skip
CONTROL = ["--dataset", "fmnist", "--model", "mlp", "--split", "dirichlet", "--alpha", "0.5", "--arms", "plain,diff-init",
           "--models", "2", "--batch-size", "64", "--momentum", "0.9", "--weight-decay", "5e-4", "--held-out", "0.2",
           "--where", "union", "--points", "5", "--seeds", ",".join(map(str, pilot.SEEDS))]  # fmt: skip


def flags(regime: str, lr: str, arm: str, seed: int) -> list[str]:
    clients, epochs = pilot.REGIMES[regime]
    return [*DESIGN, *pilot.ARMS[arm], "--num-clients", str(clients), "--local-epochs", str(epochs), "--lr", lr,
            "--seed", str(seed)]  # fmt: skip


def control_flags(regime: str, lr: str) -> list[str]:
    """The gate's tool at the regime's steps: two models, each on a shard of a client's size."""
    clients, epochs = pilot.REGIMES[regime]
    return [*CONTROL, "--train-subset", str(2 * TRAIN_SAMPLES // clients), "--epochs", str(epochs), "--lr", lr]


def cells() -> Iterator[tuple[str, str, str | None, int | None]]:
    """(regime, lr, arm, seed) in BLOCKS' order, each block's control (arm None) after its runs."""
    for regime, lr in pilot.BLOCKS:
        for seed in pilot.SEEDS:
            for arm in pilot.ARMS:
                yield regime, lr, arm, seed
        yield regime, lr, None, None


def _cpu() -> float:
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def run_cell(regime: str, lr: str, arm: str | None, seed: int | None) -> None:
    """One cell, unless it finished earlier; its CPU seconds appended to cpu.jsonl."""
    from fedpfn.cli.simulate import checked_config, parse_args
    from fedpfn.core.files import SUMMARY
    from fedpfn.runtime.compare import ensure_run
    from fedpfn.runtime.ensure import in_use

    if arm is None:
        folder = pilot.control_path(regime, lr)
        if (folder / "lmc.json").exists():
            return
        try:
            from fedpfn.analysis import lmc
        except ImportError as err:  # a checkout whose gate tool does not import: the runs go on, a rerun adds it
            print(f"{folder}: control not run ({err})", flush=True)
            return
        work = lambda: lmc.main([*control_flags(regime, lr), "--out", str(folder), "--overwrite"])  # noqa: E731
    else:
        folder = pilot.run_path(regime, lr, arm, seed or 0)
        if (folder / SUMMARY).exists():
            return
        if in_use(folder):  # another worker runs it now; a later pass finds it finished
            print(f"{folder}: running in another process, skipped", flush=True)
            return
        work = lambda: ensure_run(checked_config(parse_args([*flags(regime, lr, arm, seed or 0), "--out", str(folder)])))  # noqa: E731
    cpu, wall = _cpu(), time.time()
    work()
    line = {"cell": str(folder.relative_to(pilot.RUNS)), "cpu_s": round(_cpu() - cpu, 1), "wall_s": round(time.time() - wall, 1)}
    with pilot.TIMES.open("a") as out:
        out.write(json.dumps(line) + "\n")
    print(json.dumps(line), flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("stage", choices=("run", "page"))
    parser.add_argument("--stored", action="store_true", help="page: from docs/alignment/pilot.json alone")
    parser.add_argument("--only", help="run: one regime (r24, r114, r225, r375)")
    parser.add_argument("--lr", help="run: one learning rate (0.01, 0.03, 0.1)")
    args = parser.parse_args(argv)
    if args.only is not None and args.only not in pilot.REGIMES:
        parser.error(f"--only: '{args.only}' is not a regime; choose one of {', '.join(pilot.REGIMES)}")
    if args.lr is not None and args.lr not in pilot.LRS:
        parser.error(f"--lr: '{args.lr}' is not one of the pilot's; choose one of {', '.join(pilot.LRS)}")
    if args.stage == "page" and (args.only or args.lr):
        parser.error("--only and --lr choose cells to run; page reads every block")
    if args.stage == "run":
        pilot.RUNS.mkdir(parents=True, exist_ok=True)
        for cell in cells():
            if args.only in (None, cell[0]) and args.lr in (None, cell[1]):
                run_cell(*cell)
        return 0
    pilot.write_page(args.stored)
    return 0


if __name__ == "__main__":
    sys.exit(main())
