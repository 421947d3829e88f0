"""Simulator overhead: steady seconds per round against a plain PyTorch loop, same work.

Steady wall time per round of the Flower/Ray simulation against a plain sequential
PyTorch loop doing exactly the same local training, in one process run.

    .venv/bin/python benchmarks/bench_overhead.py                       # 20 clients, 10 per round, 4 rounds
    .venv/bin/python benchmarks/bench_overhead.py --repeats 3 --rounds 5
    .venv/bin/python benchmarks/bench_overhead.py --model mlp --per-round 4 --rounds 3 --repeats 1   # quick

The plain loop is `plain.plain_fedavg`: the same clients, indices, initial model, batch
order, optimizer, FedAvg average and per-round evaluation as the simulator (see plain.py).
Its accuracy is printed next to the simulator's as a check that the work is the same.

Round 1 is left out of the per-round figures on both sides (actors start, each loads the
dataset and partitions); the simulator's start-up is printed apart, phase by phase.

Threads: the simulator runs one Ray actor per `client_cpus` (1) CPU, i.e. 2 actors in
parallel with 1 torch thread each on 2 cores. The plain loop is timed with torch's default
threads (= cores, the fair baseline: same cores, no parallel clients) and with 1 thread
(the per-client work the actors do; half the machine). From the 1-thread per-client
times the script also gives the ideal makespan of the same clients on the actors with
no overhead at all (greedy in dispatch order), which isolates the framework's own cost.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager

import torch
from plain import PlainRound, plain_fedavg
from report import load_average, median, print_header, ratio, spread, table, wait_for_quiet
from simulation import BREAKDOWN, SimTiming, bench_config, steady, timed_simulation

from fedpfn.core.config import RunConfig

TARGET = 1.10  # simulator / fair plain loop, steady seconds per round
CPU = torch.device("cpu")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--clients", type=int, default=20)
    ap.add_argument("--per-round", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=4, help="rounds per run; round 1 is not counted")
    ap.add_argument("--repeats", type=int, default=2, help="interleaved repetitions of all three")
    ap.add_argument("--model", default="cnn")
    ap.add_argument("--partition", default="dirichlet")
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--client-cpus", type=float, default=1.0)
    ap.add_argument("--no-trace", action="store_true", help="run fedpfn's ClientApp untraced")
    ap.add_argument(
        "--skip-default-threads",
        action="store_true",
        help="time the plain loop with 1 thread only (on a loaded machine torch's multi-threaded "
        "loop can be 10x slower and dominate the run)",
    )
    ap.add_argument(
        "--poll-cap",
        type=float,
        default=0.0,
        help="also run the simulator with fedpfn.runtime.transport.MAX_POLL (the longest wait between two pulls "
        "of replies) set to this many seconds, for that run only",
    )
    ap.add_argument("--quiet-load", type=float, default=0.0, help="wait for 1-min load below this first")
    args = ap.parse_args(argv)
    if args.rounds < 2:
        ap.error("--rounds must be at least 2 (round 1 is start-up)")
    return args


@contextmanager
def poll_cap(seconds: float) -> Iterator[None]:
    """The server's reply polling capped at `seconds` between pulls, for the block (a variant)."""
    from fedpfn.runtime import transport

    original = transport.MAX_POLL
    transport.MAX_POLL = seconds
    try:
        yield
    finally:
        transport.MAX_POLL = original


def greedy_makespan(durations: list[float], workers: int) -> float:
    """Time to run `durations` in order on `workers` (each job to the first free worker)."""
    free = [0.0] * max(workers, 1)
    for d in durations:
        free[free.index(min(free))] += d
    return max(free)


Runs = list[list[PlainRound]]  # per repeat, per round


def steady_plain(runs: Runs) -> list[PlainRound]:
    return [r for rows in runs for r in rows if r.round > 1]


def print_steady(
    sims: list[SimTiming], capped: list[SimTiming], plain1: Runs, plain_d: Runs, actors: int
) -> None:
    """The main table: steady seconds per round of the simulator, of each baseline and variant."""
    sim = [r.seconds for s in sims for r in steady(s)]
    p1 = [r.seconds for r in steady_plain(plain1)]
    pd = [r.seconds for r in steady_plain(plain_d)]
    ideal = [greedy_makespan(list(r.clients.values()), actors) + r.evaluate for r in steady_plain(plain1)]
    s, threads = median(sim), torch.get_num_threads()
    rows = [[f"simulator (Ray, {actors} actors x 1 thread)", s, spread(sim), "1.000"]]
    others = [
        (f"plain loop, {threads} threads (fair baseline)", pd),
        ("plain loop, 1 thread (half the cores)", p1),
        (f"ideal: 1-thread clients on {actors} actors, 0 overhead", ideal),
    ]
    if capped:
        variant = [r.seconds for c in capped for r in steady(c)]
        others.append(("simulator, reply polling capped (--poll-cap)", variant))
    for what, values in others:
        rows.append([what, median(values), spread(values), ratio(s, median(values))])
    print("\nsteady seconds per round (rounds 2.., all repeats; median and min..max)")
    print(table(["what", "median s", "min..max", "sim / this"], rows))
    fair = ratio(s, median(pd))
    verdict = "not measured" if fair == "-" else "meets" if float(fair) <= TARGET else "misses"
    print(f"ratio sim / plain (fair baseline, {threads} threads) = {fair}; target <= {TARGET}: {verdict}")


def print_phases(sims: list[SimTiming]) -> None:
    print("\nsimulator start-up and phases (seconds, per repeat)")
    rows = [[i + 1, s.total, *s.phases.values()] for i, s in enumerate(sims)]
    print(table(["repeat", "total", *sims[0].phases], rows))
    print("(->round 1: call to round 1 start; round 1 includes each actor loading data; discover: "
          "waiting for every partition's node, of which queries: asking the nodes)")  # fmt: skip


def print_breakdown(sims: list[SimTiming], capped: list[SimTiming], plain1: Runs) -> None:
    """Where a steady simulator round goes, and whether the clients' work equals the plain loop's."""
    rounds = [(f"{i + 1}/{r.round}", r) for i, s in enumerate(sims) for r in steady(s)]
    rounds += [(f"capped {i + 1}/{r.round}", r) for i, s in enumerate(capped) for r in steady(s)]
    print("\nsteady simulator rounds: where the time goes (seconds)")
    print(table(["rep/round", *BREAKDOWN], [[label, *r.breakdown()] for label, r in rounds]))
    print("(client fit: clients.jsonl train_seconds; train - busiest: dispatch, idle, transfer, aggregation)")
    plain = median(sum(r.clients.values()) for r in steady_plain(plain1))
    sim = median(r.client_fit for s in sims for r in steady(s))
    print(f"sum of client training per round: plain 1-thread {plain:.3f} s, in actors {sim:.3f} s "
          f"(ratio {ratio(sim, plain)})")  # fmt: skip


def print_accuracy(sim: SimTiming, plain1: list[PlainRound], plain_d: list[PlainRound]) -> None:
    """The same work gives the same model: test accuracy per round on each side."""
    lines = [("sim", [r["test_accuracy"] for r in sim.metrics])]
    lines.append(("plain 1 thread", [r.accuracy for r in plain1]))
    if plain_d:
        lines.append((f"plain {torch.get_num_threads()} threads", [r.accuracy for r in plain_d]))
    print("\ncheck, test accuracy per round:")
    for what, values in lines:
        print(f"   {what:>16}: " + " ".join(f"{a:.4f}" for a in values))


def config_of(args: argparse.Namespace) -> RunConfig:
    return bench_config(
        algorithm="fedavg", model=args.model, num_clients=args.clients, clients_per_round=args.per_round,
        rounds=args.rounds, partition=args.partition, local_epochs=args.epochs, client_cpus=args.client_cpus,
    )  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    cfg = config_of(args)
    actors = int((os.cpu_count() or 1) // args.client_cpus)
    print_header(
        "bench_overhead: simulator vs plain PyTorch loop, same FedAvg work",
        {"model": cfg.task.model, "clients": cfg.federation.num_clients, "per_round": cfg.federation.clients_per_round,
         "rounds": cfg.federation.rounds, "partition": cfg.partition, "epochs": cfg.local.local_epochs,
         "batch": cfg.local.batch_size, "actors": actors, "repeats": args.repeats},
    )  # fmt: skip
    from fedpfn.core.cache import client_indices, dataset_on

    dataset_on(cfg, CPU), client_indices(cfg)  # loaded once, outside every timing
    wait_for_quiet(args.quiet_load)
    plain1: Runs = []
    plain_d: Runs = []
    sims: list[SimTiming] = []
    capped: list[SimTiming] = []
    loads = []
    for rep in range(args.repeats):
        loads.append(load_average())
        plain1.append(plain_fedavg(cfg, CPU, threads=1))
        if not args.skip_default_threads:
            plain_d.append(plain_fedavg(cfg, CPU))
        sims.append(timed_simulation(cfg, trace=not args.no_trace))
        if args.poll_cap:
            with poll_cap(args.poll_cap):
                capped.append(timed_simulation(cfg, trace=not args.no_trace))
        print(f"   repeat {rep + 1}/{args.repeats} done, load {load_average()}", flush=True)
    print_steady(sims, capped, plain1, plain_d, actors)
    print_phases(sims)
    print_breakdown(sims, capped, plain1)
    print_accuracy(sims[-1], plain1[-1], plain_d[-1] if plain_d else [])
    print(f"\nload average per repeat start: {' | '.join(loads)}; at end: {load_average()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
