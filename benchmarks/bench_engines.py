"""The plain loop, the Ray engine and the batched engine doing the same FedAvg and FedPFN work.

    .venv/bin/python benchmarks/bench_engines.py            # this machine's plan (below)
    .venv/bin/python benchmarks/bench_engines.py --models mlp --per-round 10,100 --engines plain,batched
    .venv/bin/python benchmarks/bench_engines.py --models resnet20 --samples 50 --rounds 2 --repeats 3
    .venv/bin/python benchmarks/bench_engines.py --engines plain,batched,batched:loop   # a mode set, not auto

The plan by default: with a GPU, the MLP, the CNN and ResNet-20 at 10, 100 and 1,000 clients
a round; on the CPU at 10 and 100. Every client holds `--samples` images of Fashion-MNIST
(default 600; iid; the federation has max(per-round, 60,000 / samples) clients, the dataset
repeated where it has too few), trains one epoch, batch 50, SGD with momentum; FedPFN anchors
40 % of the weights. No timed round evaluates the global model: the engines evaluate only in
the last of their `--rounds`, which is never run (the run is stopped once the round before
is written; an evaluation of the test set cost 30 s of a CNN run on the busy 2 cores), and the
plain loop evaluates none. So the timed rounds are training and aggregation.

Built for a shared machine, where another process may take a core at any moment:
- the baseline is the best of three plain loops (benchmarks/plain.py: a textbook torch.optim
  loop, one client after another, FedAvg by examples): one in this process with 1 torch thread,
  one with all of them (a 2-thread loop collapses when another process takes a core), and, on
  several cores, two processes side by side each training half of every round's clients on one
  thread (`plain/2x1`: the most two cores give a loop that holds a model per process);
- every figure is of steady rounds only, 2..n-1 (round 1, with start-up, is left out);
- the contenders' repeats are interleaved (plain/1, plain/all, ray, batched, plain/1, ...), so
  a burst of load hits them alike, and each figure is the median of `--repeats` runs with
  its spread (min..max);
- the load average is printed with every case, at its start and its end; `--beside busy` runs
  the same plan with one busy process beside it (a Python loop at normal priority).

`x best plain` is each contender's rate over the best baseline's. `engine ms/client` is what a
client costs the engine beyond the 1-thread loop: the cores it keeps busy over its rate, less the
1-thread loop's seconds per client (meaningful on idle cores).

Each engine runs as `run_sim.py` in a process of its own, from launch: `launch -> round 1`
is the wall time until round 1's metrics row is written, `start-up` the part of it before
round 1 began; `updates/s` is clients a round over the median round time of rounds 2..n-1.
Memory: the peak PSS of each contender's process tree (shared pages counted once: the workers
of the processes mode share the driver's dataset); on a GPU also nvidia-smi's peak.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import torch
from bench_gpu import NvidiaSmi
from memory import TreeMemory
from plain import plain_fedavg
from report import load_average, median, mib, print_header, ratio, spread, table

from fedpfn.core.files import METRICS
from fedpfn.core.flags import OneLineParser
from fedpfn.runtime.algorithms import load_config

ROOT = Path(__file__).resolve().parents[1]
ENGINES = ("plain", "ray", "batched")
MODES = ("processes", "loop", "threads", "vmap")  # batched:MODE runs the batched engine in that --engine-mode
FMNIST_TRAIN = 60_000
NAN = float("nan")
PAIR = "plain/2x1"  # two plain loops side by side, one thread each


@dataclass(frozen=True)
class Case:
    model: str
    algorithm: str
    per_round: int
    samples: int  # images per client

    @property
    def num_clients(self) -> int:
        return max(self.per_round, FMNIST_TRAIN // self.samples)

    def flags(self, rounds: int) -> list[str]:
        """run_sim.py's flags for the case: clients of `samples` images (epochs make up for a
        dataset too small for the federation)."""
        epochs = max(1, round(self.num_clients * self.samples / FMNIST_TRAIN))
        return [
            "--model", self.model, "--algorithm", self.algorithm, "--num-clients", str(self.num_clients),
            "--clients-per-round", str(self.per_round), "--rounds", str(rounds), "--partition", "iid",
            "--batch-size", "50", "--local-epochs", str(epochs), "--eval-every", str(rounds),
            "--min-partition-size", "1",
        ]  # fmt: skip


@dataclass
class Measured:
    """One run of one contender."""

    contender: str
    updates_per_second: float  # of the steady rounds
    to_round_1: float = NAN  # launch -> round 1's row written (NaN for the in-process plain loop)
    start_up: float = NAN  # of which before round 1 began: process, imports, data, model, Ray
    pss_mib: float = NAN
    gpu_mib: float = NAN


def engine_run(case: Case, engine: str, rounds: int, out: Path) -> Measured:
    """One run_sim.py process of `engine`, timed from launch, its process tree's memory sampled.

    The run is set to `rounds` rounds and stopped (SIGTERM, as Ctrl-C would) once round
    `rounds - 1` is written: the last round evaluates the global model, and on a busy CPU
    that evaluation costs more than the rounds timed, so it is never run.
    """
    name, _, mode = engine.partition(":")  # batched:loop -> --engine batched --engine-mode loop
    flags = [*case.flags(rounds), "--engine", name, *(["--engine-mode", mode] if mode else [])]
    cmd = [sys.executable, str(ROOT / "run_sim.py"), *flags, "--out", str(out)]
    env = {**os.environ, "FLWR_TELEMETRY_ENABLED": "0", "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1"}
    metrics = out / METRICS
    with TreeMemory(include_self=False) as tree, NvidiaSmi(0) as smi:
        start = time.monotonic()
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        first = NAN
        while proc.poll() is None:
            written = metrics.read_text().count("\n") if metrics.exists() else 0
            if math.isnan(first) and written >= 1:
                first = time.monotonic() - start
            if written >= rounds - 1:
                proc.send_signal(signal.SIGTERM)
                proc.wait()
            time.sleep(0.02)
        if proc.returncode not in (0, -signal.SIGTERM, 128 + signal.SIGTERM):
            raise RuntimeError(f"{engine} failed: {proc.stderr.read()[-2000:]}")
    rows = [json.loads(line) for line in metrics.read_text().splitlines()][: rounds - 1]
    seconds = median(row["seconds"] for row in rows[1:])
    gpu = max(smi.total, default=NAN) - (smi.total[0] if smi.total else 0)
    return Measured(engine, case.per_round / seconds, first, first - rows[0]["seconds"], mib(tree.peak_pss()), gpu)


def plain_run(case: Case, rounds: int, device: torch.device, threads: int) -> Measured:
    """The baseline in this process with `threads` torch threads: rounds 2..n-1 of a bare loop
    (the rounds the engines are timed on), no evaluation."""
    flags = case.flags(rounds - 1)
    cfg = load_config({key.removeprefix("--"): value for key, value in zip(flags[::2], flags[1::2])})
    anchors = 0.4 if case.algorithm == "fedpfn" else 0.0
    with TreeMemory() as tree:
        timed = plain_fedavg(cfg, device, threads=threads, anchors=anchors, evaluate_rounds=False)
    seconds = median(r.seconds for r in timed[1:])
    gpu = mib(torch.cuda.max_memory_allocated(device)) if device.type == "cuda" else NAN
    return Measured(f"plain/{threads}", case.per_round / seconds, pss_mib=mib(tree.peak_pss()), gpu_mib=gpu)


def plain_pair(case: Case, rounds: int) -> Measured:
    """Two plain loops side by side, each in a process of its own on one thread, each training half
    of every round's clients (its own seed): the round takes as long as the slower half."""
    half = Case(case.model, case.algorithm, -(-case.per_round // 2), case.samples)
    anchors = "0.4" if case.algorithm == "fedpfn" else "0"
    command = [sys.executable, str(ROOT / "benchmarks" / "plain.py"), "1", anchors, *half.flags(rounds - 1)]
    with TreeMemory(include_self=False) as tree:
        loops = [subprocess.Popen([*command, "--seed", str(seed)], cwd=ROOT, stdout=subprocess.PIPE, text=True)
                 for seed in (0, 1)]  # fmt: skip
        outputs = [loop.communicate()[0] for loop in loops]
    if any(loop.returncode for loop in loops):
        raise RuntimeError("a plain loop of the pair failed")
    slower = max(median(json.loads(out)[1:]) for out in outputs)
    return Measured(PAIR, case.per_round / slower, pss_mib=mib(tree.peak_pss()))


def contenders(engines: list[str]) -> list[str]:
    """The runs of one repeat, in order: the plain loops (1 thread, all threads, two processes of
    one thread each), then the engines."""
    cores = os.cpu_count() or 1
    plain = [f"plain/{n}" for n in sorted({1, cores})] + ([PAIR] if cores > 1 else []) if "plain" in engines else []
    return plain + [e for e in engines if e != "plain"]


def measure_case(case: Case, args: argparse.Namespace, device: torch.device) -> dict[str, list[Measured]]:
    """Every contender `args.repeats` times, interleaved: A B C, A B C, ..."""
    found: dict[str, list[Measured]] = {name: [] for name in contenders(args.engines)}
    with tempfile.TemporaryDirectory(prefix="fedpfn-bench-") as scratch:
        for repeat in range(args.repeats):
            for name, runs in found.items():
                if name == PAIR:
                    runs.append(plain_pair(case, args.rounds))
                elif name.startswith("plain/"):
                    runs.append(plain_run(case, args.rounds, device, int(name.split("/")[1])))
                else:
                    runs.append(engine_run(case, name, args.rounds, Path(scratch) / f"{name}{repeat}"))
    return found


def default_plan(cuda: bool) -> dict[str, str]:
    per_round = "10,100,1000" if cuda else "10,100"
    return {"models": "mlp,cnn,resnet20", "per_round": per_round, "algorithms": "fedavg"}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    plan = default_plan(torch.cuda.is_available())
    prog = os.environ.get("FEDPFN_PROG", "python benchmarks/bench_engines.py")  # `fedpfn bench` sets it
    ap = OneLineParser(prog=prog, description=__doc__.split("\n\n")[0])  # one line, not a usage dump
    ap.add_argument("--models", default=plan["models"])
    ap.add_argument("--per-round", default=plan["per_round"], help="clients a round, comma-separated")
    ap.add_argument("--algorithms", default=plan["algorithms"], help="fedavg and/or fedpfn")
    ap.add_argument(
        "--engines", default=",".join(ENGINES), help=f"any of {', '.join(ENGINES)}, batched:MODE ({', '.join(MODES)})"
    )
    ap.add_argument("--rounds", type=int, default=3, help="rounds set per run: 1 is start-up, 2..n-1 timed, n never run")
    ap.add_argument("--repeats", type=int, default=3, help="runs of each contender, interleaved")
    ap.add_argument("--samples", type=int, default=600, help="images per client (fewer: fewer steps)")
    ap.add_argument("--beside", default="idle", help="idle and/or busy (one busy process beside the measurements)")
    args = ap.parse_args(argv)
    args.beside = args.beside.split(",")
    if bad := [b for b in args.beside if b not in ("idle", "busy")]:
        ap.error(f"--beside: unknown {', '.join(bad)}; use idle and/or busy")
    args.models, args.algorithms, args.engines = (v.split(",") for v in (args.models, args.algorithms, args.engines))
    args.per_round = [int(v) for v in args.per_round.split(",")]
    known = [*ENGINES, *(f"batched:{mode}" for mode in MODES)]
    if bad := [e for e in args.engines if e not in known] + [a for a in args.algorithms if a not in ("fedavg", "fedpfn")]:
        ap.error(f"unknown {', '.join(bad)}; engines: {', '.join(ENGINES)}; algorithms: fedavg, fedpfn")
    if args.rounds < 3:
        ap.error("--rounds must be at least 3 (round 1 is start-up, the last evaluates and is not run)")
    if args.repeats < 1 or not 1 <= args.samples <= FMNIST_TRAIN:
        ap.error(f"--repeats must be at least 1 and --samples within 1..{FMNIST_TRAIN}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    print_header("bench_engines: plain loops vs Ray vs batched, the same FedAvg / FedPFN work", vars(args))
    for beside in args.beside:
        with busy_process(beside == "busy"):
            for model in args.models:
                for per_round in args.per_round:
                    for algorithm in args.algorithms:
                        case = Case(model, algorithm, per_round, args.samples)
                        load_before = load_average()
                        found = measure_case(case, args, device)
                        print_case(case, found, load_before, beside)
    print(f"\nload average at end: {load_average()}")
    return 0


@contextmanager
def busy_process(wanted: bool) -> Iterator[None]:
    """One process spinning beside the measurements (a user's other work taking a core), or none."""
    if not wanted:
        yield
        return
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        yield
    finally:
        busy.kill()
        busy.wait()


def cores_used(name: str, case: Case) -> int:
    """The cores a contender keeps busy: one for the 1-thread loop and `loop` mode, else as many
    as the machine has and the round's clients fill."""
    single = name in ("plain/1", "batched:loop")
    return 1 if single else min(os.cpu_count() or 1, case.per_round)


def engine_cost(name: str, case: Case, rate: dict[str, float]) -> str:
    """ms a client costs the contender beyond the 1-thread loop (its cores' time per client, less
    the loop's); blank for the plain loops."""
    if name.startswith("plain/") or "plain/1" not in rate:
        return ""
    return f"{1000 * (cores_used(name, case) / rate[name] - 1 / rate['plain/1']):.1f}"


def print_case(case: Case, found: dict[str, list[Measured]], load_before: str, beside: str) -> None:
    """Medians over the repeats, their spread, and ratios to the best plain loop and to Ray."""
    rate = {name: median(m.updates_per_second for m in runs) for name, runs in found.items()}
    plain = {name: value for name, value in rate.items() if name.startswith("plain/")}
    best = max(plain, key=plain.__getitem__) if plain else None
    rows = [
        [name, f"{rate[name]:.2f}", spread(m.updates_per_second for m in runs),
         ratio(rate[name], rate[best] if best else NAN, 2), ratio(rate[name], rate.get("plain/1", NAN), 2),
         ratio(rate[name], rate.get("ray", NAN), 2), engine_cost(name, case, rate),
         f"{median(m.to_round_1 for m in runs):.1f}", f"{median(m.start_up for m in runs):.1f}",
         f"{max(m.pss_mib for m in runs):.0f}", f"{max(m.gpu_mib for m in runs):.0f}"]
        for name, runs in found.items()
    ]  # fmt: skip
    repeats = len(next(iter(found.values())))
    print(
        f"\n{case.model}, {case.algorithm}, {case.per_round} clients a round of {case.samples} images "
        f"({case.num_clients} in all), {beside}{' (one busy process beside)' if beside == 'busy' else ''}, "
        f"medians of {repeats} interleaved runs; best plain loop: {best}; "
        f"load average {load_before} at start, {load_average()} at end:"
    )
    headers = ["contender", "updates/s", "min..max", "x best plain", "x plain/1", "x ray", "engine ms/client",
               "launch -> round 1 s", "start-up s", "peak PSS MiB", "GPU MiB"]  # fmt: skip
    print(table(headers, rows), flush=True)


if __name__ == "__main__":
    sys.exit(main())
