"""The plain loop, the Ray engine and the batched engine doing the same FedAvg and FedPFN work.

    .venv/bin/python benchmarks/bench_engines.py            # this machine's plan (below)
    .venv/bin/python benchmarks/bench_engines.py --models mlp --per-round 10 --rounds 3
    .venv/bin/python benchmarks/bench_engines.py --engines batched,ray --algorithms fedavg

The plan by default: with a GPU, the MLP, the CNN and ResNet-20 at 10, 100 and 1,000 clients
a round; on the CPU, the three models at 10 clients a round. Every client holds 600 images
of Fashion-MNIST (iid; the federation has max(per-round, 100) clients, the dataset repeated
where it has too few), trains one epoch, batch 50, SGD with momentum; FedPFN anchors 40 %
of the weights. The global model is evaluated in the last round only, so steady rounds
time training and aggregation.

Each engine runs as `run_sim.py` in a process of its own, from launch: `launch -> round 1`
is the wall time until round 1's metrics row is written (start-up, data, model, round 1),
`start-up` the part of it before round 1 began (round 1's own seconds taken off);
`updates/s` is clients a round over the median round time of rounds 2..n. The plain loop
(benchmarks/plain.py: a textbook torch.optim loop, one client after another, FedAvg by
examples) runs in this process after its first round, same clients and batches. Memory:
the peak resident set of the engine's process tree; on a GPU also nvidia-smi's peak use.
Ratios are to the plain loop and to the Ray engine, measured in the same run.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from bench_gpu import NvidiaSmi
from memory import TreeMemory
from plain import plain_fedavg
from report import load_average, median, mib, print_header, ratio, table

from fedpfn.core.files import METRICS
from fedpfn.runtime.algorithms import load_config

ROOT = Path(__file__).resolve().parents[1]
ENGINES = ("plain", "ray", "batched")
SAMPLES_PER_CLIENT = 600
FMNIST_TRAIN = 60_000


@dataclass(frozen=True)
class Case:
    model: str
    algorithm: str
    per_round: int

    @property
    def num_clients(self) -> int:
        return max(self.per_round, 100)

    def flags(self, rounds: int) -> list[str]:
        """run_sim.py's flags for the case: clients of SAMPLES_PER_CLIENT images (epochs make up
        for a dataset too small for the federation)."""
        epochs = max(1, round(self.num_clients * SAMPLES_PER_CLIENT / FMNIST_TRAIN))
        return [
            "--model", self.model, "--algorithm", self.algorithm, "--num-clients", str(self.num_clients),
            "--clients-per-round", str(self.per_round), "--rounds", str(rounds), "--partition", "iid",
            "--batch-size", "50", "--local-epochs", str(epochs), "--eval-every", str(rounds),
            "--min-partition-size", "1",
        ]  # fmt: skip


@dataclass
class Measured:
    engine: str
    to_round_1: float  # launch -> round 1's row written (nan for the in-process plain loop)
    start_up: float  # of which before round 1 began: process, imports, data, model, Ray
    updates_per_second: float
    rss_mib: float
    gpu_mib: float


def engine_run(case: Case, engine: str, rounds: int, out: Path) -> Measured:
    """One run_sim.py process of `engine`, timed from launch, its process tree's memory sampled."""
    cmd = [sys.executable, str(ROOT / "run_sim.py"), *case.flags(rounds), "--engine", engine, "--out", str(out)]
    env = {**os.environ, "FLWR_TELEMETRY_ENABLED": "0", "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1"}
    metrics = out / METRICS
    with TreeMemory() as tree, NvidiaSmi(0) as smi:
        start = time.monotonic()
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        first = float("nan")
        while proc.poll() is None:
            if first != first and metrics.exists() and metrics.read_text().count("\n") >= 1:
                first = time.monotonic() - start
            time.sleep(0.02)
        if proc.returncode != 0:
            raise RuntimeError(f"{engine} failed: {proc.stderr.read()[-2000:]}")
    rows = [json.loads(line) for line in metrics.read_text().splitlines()]
    seconds = median(row["seconds"] for row in rows[1:])
    peak = tree.peak()
    gpu = max(smi.total, default=float("nan")) - (smi.total[0] if smi.total else 0)
    start_up = first - rows[0]["seconds"]
    return Measured(engine, first, start_up, case.per_round / seconds, mib(peak.rss) if peak else float("nan"), gpu)


def plain_run(case: Case, rounds: int, device: torch.device) -> Measured:
    """The baseline in this process: rounds 2..n of a bare loop on `device`."""
    flags = case.flags(rounds)
    cfg = load_config({key.removeprefix("--"): value for key, value in zip(flags[::2], flags[1::2])})
    anchors = 0.4 if case.algorithm == "fedpfn" else 0.0
    with TreeMemory() as tree:
        timed = plain_fedavg(cfg, device, anchors=anchors)
    seconds = median(r.seconds - r.evaluate for r in timed[1:])  # the engines evaluate only the last round
    peak = tree.peak()
    gpu = torch.cuda.max_memory_allocated(device) if device.type == "cuda" else float("nan")
    nan = float("nan")
    return Measured("plain", nan, nan, case.per_round / seconds, mib(peak.rss) if peak else nan, mib(gpu))


def default_plan(cuda: bool) -> dict[str, str]:
    return {"models": "mlp,cnn,resnet20", "per_round": "10,100,1000" if cuda else "10", "algorithms": "fedavg,fedpfn"}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    cuda = torch.cuda.is_available()
    plan = default_plan(cuda)
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default=plan["models"])
    ap.add_argument("--per-round", default=plan["per_round"], help="clients a round, comma-separated")
    ap.add_argument("--algorithms", default=plan["algorithms"], help="fedavg and/or fedpfn")
    ap.add_argument("--engines", default=",".join(ENGINES), help=f"any of {', '.join(ENGINES)}")
    ap.add_argument("--rounds", type=int, default=4, help="rounds per run (round 1 is start-up)")
    args = ap.parse_args(argv)
    args.models, args.algorithms, args.engines = (v.split(",") for v in (args.models, args.algorithms, args.engines))
    args.per_round = [int(v) for v in args.per_round.split(",")]
    if bad := [e for e in args.engines if e not in ENGINES] + [a for a in args.algorithms if a not in ("fedavg", "fedpfn")]:
        ap.error(f"unknown {', '.join(bad)}; engines: {', '.join(ENGINES)}; algorithms: fedavg, fedpfn")
    if args.rounds < 2:
        ap.error("--rounds must be at least 2 (round 1 is start-up)")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    print_header("bench_engines: plain loop vs Ray vs batched, the same FedAvg / FedPFN work", vars(args))
    for model in args.models:
        for per_round in args.per_round:
            for algorithm in args.algorithms:
                case = Case(model, algorithm, per_round)
                found: dict[str, Measured] = {}
                with tempfile.TemporaryDirectory(prefix="fedpfn-bench-") as scratch:
                    for engine in args.engines:
                        if engine == "plain":
                            found[engine] = plain_run(case, args.rounds, device)
                        else:
                            found[engine] = engine_run(case, engine, args.rounds, Path(scratch) / engine)
                print_case(case, found)
    print(f"\nload average at end: {load_average()}")
    return 0


def print_case(case: Case, found: dict[str, Measured]) -> None:
    base = found.get("plain")
    ray = found.get("ray")
    rows = [
        [m.engine, f"{m.to_round_1:.1f}", f"{m.start_up:.1f}", f"{m.updates_per_second:.2f}",
         ratio(m.updates_per_second, base.updates_per_second if base else float("nan"), 2),
         ratio(m.updates_per_second, ray.updates_per_second if ray else float("nan"), 2),
         f"{m.rss_mib:.0f}", "-" if m.gpu_mib != m.gpu_mib else f"{m.gpu_mib:.0f}"]
        for m in found.values()
    ]  # fmt: skip
    print(f"\n{case.model}, {case.algorithm}, {case.per_round} clients a round ({case.num_clients} in all):")
    headers = ["engine", "launch -> round 1 s", "start-up s", "updates/s", "x plain", "x ray", "peak RSS MiB", "GPU MiB"]
    print(table(headers, rows), flush=True)


if __name__ == "__main__":
    sys.exit(main())
