"""Simulator overhead: steady wall time per round of the Flower/Ray simulation against a
plain sequential PyTorch loop doing exactly the same local training, in one process run.

    .venv/bin/python benchmarks/bench_overhead.py                       # 20 clients, 10 per round, 4 rounds
    .venv/bin/python benchmarks/bench_overhead.py --repeats 3 --rounds 5
    .venv/bin/python benchmarks/bench_overhead.py --clients 200 --per-round 4 --rounds 3   # quick

Same work on both sides: the clients of each round from `strategies.sample_clients`, each
client's indices from `fedpfn.workspace.client_indices`, the model from `initial_model`,
batches from `fedpfn.training.minibatches` seeded with `clients.base.data_order_seed`,
`make_optimizer` + `train_local`, FedAvg weighted by examples, and the test-set evaluation
the server does every round. The plain loop's accuracy is printed next to the simulator's
as a check that the work really is the same.

Round 1 is left out of the per-round figures on both sides (actors start, each loads the
dataset and partitions); the simulator's start-up is printed apart, phase by phase.

Threads: the simulator runs one Ray actor per `client_cpus` (1) CPU, i.e. 2 actors in
parallel with 1 torch thread each on 2 cores. The plain loop is timed with torch's default
threads (= cores, the fair baseline: same cores, no parallel clients) and with 1 thread
(the per-client work the actors do; half the machine). From the 1-thread per-client
times the script also gives the ideal makespan of the same clients on 2 actors with
no overhead at all (greedy in dispatch order), which isolates the framework's own cost.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time

import common
import torch
from common import median, spread, table


def plain_run(cfg, rounds: int, threads: int) -> list[dict]:
    """FedAvg rounds as a bare PyTorch loop; per round: seconds, client seconds, accuracy."""
    from clients.base import data_order_seed
    from fedpfn.training import evaluate, make_optimizer, minibatches, train_local
    from fedpfn.workspace import (
        client_indices,
        dataset_on,
        initial_model,
        model_skeleton,
    )
    from strategies import sample_clients

    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        device = torch.device("cpu")
        data = dataset_on(cfg, device)
        parts = client_indices(cfg)
        global_model = initial_model(cfg)
        state = {k: v.detach().clone() for k, v in global_model.state_dict().items()}
        model = model_skeleton(cfg, device)
        rows = []
        for server_round in range(1, rounds + 1):
            t0 = time.perf_counter()
            chosen = sample_clients(cfg.seed, server_round, cfg.num_clients, cfg.clients_per_round)
            client_seconds: list[float] = []
            results: list[tuple[int, dict[str, torch.Tensor]]] = []
            for pid in chosen:
                tc = time.perf_counter()
                model.load_state_dict(state)
                optimizer = make_optimizer(
                    model, cfg.optimizer, cfg.lr_at(server_round), cfg.momentum, cfg.weight_decay
                )
                gen = torch.Generator().manual_seed(data_order_seed(cfg.seed, server_round, pid))
                batches = minibatches(parts[pid], cfg.batch_size, cfg.local_epochs, gen)
                train_local(model, data.train_x, data.train_y, batches, optimizer)
                results.append(
                    (len(parts[pid]), {k: v.detach().clone() for k, v in model.state_dict().items()})
                )
                client_seconds.append(time.perf_counter() - tc)
            total = sum(n for n, _ in results)
            state = {
                k: (sum(n * s[k].double() for n, s in results) / total).to(state[k].dtype) for k in state
            }
            te = time.perf_counter()
            global_model.load_state_dict(state)
            _, acc = evaluate(global_model, data.test_x, data.test_y)
            end = time.perf_counter()
            rows.append(
                {
                    "round": server_round,
                    "seconds": end - t0,
                    "evaluate": end - te,
                    "clients": dict(zip(chosen, client_seconds)),
                    "accuracy": acc,
                }
            )
        return rows
    finally:
        torch.set_num_threads(previous)


def greedy_makespan(durations: list[float], workers: int) -> float:
    """Time to run `durations` in order on `workers` (each job to the first free worker)."""
    free = [0.0] * max(workers, 1)
    for d in durations:
        i = free.index(min(free))
        free[i] += d
    return max(free)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--clients", type=int, default=20)
    ap.add_argument("--per-round", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=4, help="rounds per run; round 1 is not counted")
    ap.add_argument("--repeats", type=int, default=2, help="interleaved repetitions of all three")
    ap.add_argument("--model", default="cnn")
    ap.add_argument("--partition", default="dirichlet")
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--client-cpus", type=float, default=1.0)
    ap.add_argument("--no-trace", action="store_true", help="run the ClientApp untraced")
    ap.add_argument(
        "--skip-default-threads",
        action="store_true",
        help="time the plain loop with 1 thread only (on a loaded machine torch's multi-threaded "
        "loop can be 10x slower and dominate the run)",
    )
    ap.add_argument("--quiet-load", type=float, default=0.0, help="wait for 1-min load below this first")
    args = ap.parse_args(argv)
    if args.rounds < 2:
        ap.error("--rounds must be at least 2 (round 1 is start-up)")

    cfg = common.bench_config(
        algorithm="fedavg",
        model=args.model,
        num_clients=args.clients,
        clients_per_round=args.per_round,
        rounds=args.rounds,
        partition=args.partition,
        local_epochs=args.epochs,
        client_cpus=args.client_cpus,
    )
    default_threads = torch.get_num_threads()
    actors = int((os.cpu_count() or 1) // args.client_cpus)
    common.print_header(
        "bench_overhead: simulator vs plain PyTorch loop, same FedAvg work",
        {
            "model": cfg.model,
            "clients": cfg.num_clients,
            "per_round": cfg.clients_per_round,
            "rounds": cfg.rounds,
            "partition": cfg.partition,
            "epochs": cfg.local_epochs,
            "batch": cfg.batch_size,
            "actors": actors,
            "repeats": args.repeats,
        },
    )
    from fedpfn.workspace import client_indices, dataset_on

    dataset_on(cfg, torch.device("cpu")), client_indices(cfg)  # load once, outside every timing
    common.wait_for_quiet(args.quiet_load, 600)

    runs: dict[str, list[list[dict]]] = {"plain-1": [], "plain-default": []}
    sims: list[common.SimTiming] = []
    loads: list[str] = []
    for rep in range(args.repeats):
        loads.append(common.load_average())
        runs["plain-1"].append(plain_run(cfg, cfg.rounds, 1))
        if not args.skip_default_threads:
            runs["plain-default"].append(plain_run(cfg, cfg.rounds, default_threads))
        sims.append(common.timed_simulation(cfg, trace=not args.no_trace))
        print(f"   repeat {rep + 1}/{args.repeats} done, load {common.load_average()}", flush=True)

    def steady_of(rows: list[dict]) -> list[float]:
        return [r["seconds"] for r in rows if r["round"] > 1]

    sim_steady = [s for sim in sims for s in common.steady(sim.rounds)]
    p1 = [s for rows in runs["plain-1"] for s in steady_of(rows)]
    pd = [s for rows in runs["plain-default"] for s in steady_of(rows)]
    # ideal: the 1-thread client times spread on the actors with no overhead, + evaluation
    ideal = []
    for rows in runs["plain-1"]:
        for r in rows:
            if r["round"] > 1:
                ideal.append(greedy_makespan(list(r["clients"].values()), actors) + r["evaluate"])
    sim_med, p1_med, pd_med, ideal_med = median(sim_steady), median(p1), median(pd), median(ideal)

    print()
    print("steady seconds per round (rounds 2.., all repeats; median and min..max)")
    print(
        table(
            ["what", "median s", "min..max", "sim / this"],
            [
                [f"simulator (Ray, {actors} actors x 1 thread)", sim_med, spread(sim_steady), "1.000"],
                [
                    f"plain loop, {default_threads} threads (fair baseline)",
                    pd_med,
                    spread(pd),
                    f"{sim_med / pd_med:.3f}",
                ],
                ["plain loop, 1 thread (half the cores)", p1_med, spread(p1), f"{sim_med / p1_med:.3f}"],
                [
                    f"ideal: 1-thread clients on {actors} actors, 0 overhead",
                    ideal_med,
                    spread(ideal),
                    f"{sim_med / ideal_med:.3f}",
                ],
            ],
        )
    )
    target = 1.10
    verdict = "not measured:" if math.isnan(pd_med) else "meets" if sim_med / pd_med <= target else "misses"
    print(
        f"ratio sim/plain (fair baseline, {default_threads} threads) = {sim_med / pd_med:.3f}: {verdict} the target <= {target}"
    )

    print()
    print("simulator start-up and phases (seconds, per repeat)")
    print(
        table(
            [
                "repeat",
                "total",
                "checks+folder",
                "server init",
                "node wait",
                "discover",
                "->round 1",
                "round 1",
                "finish",
                "teardown",
            ],
            [
                [
                    i + 1,
                    s.total,
                    s.checks_and_folder,
                    s.server_init,
                    s.node_wait,
                    s.discover,
                    s.start_to_round1,
                    s.rounds[0]["seconds"],
                    s.finish,
                    s.teardown,
                ]
                for i, s in enumerate(sims)
            ],
        )
    )
    print("(->round 1: simulate() call to round 1 start; round 1 includes each actor loading data)")

    # where a steady simulator round goes
    rows = [
        [
            f"{i + 1}/{b['round']}",
            b["seconds"],
            b["train"],
            b["evaluate"],
            b["client_fit"],
            b["busiest"],
            b["overhead"],
        ]
        for i, s in enumerate(sims)
        for b in common.round_breakdown(s)
    ]
    if rows and not args.no_trace:
        print()
        print("steady simulator rounds: where the time goes (seconds)")
        print(
            table(
                [
                    "rep/round",
                    "round",
                    "send+train+agg",
                    "evaluate",
                    "sum client fit",
                    "busiest actor",
                    "train - busiest",
                ],
                rows,
            )
        )
        print(
            "(client fit = the ClientApp's train() in the actor; 'train - busiest' = dispatch, idle, transfer, aggregation)"
        )
        plain_client = median(
            [sum(r["clients"].values()) for rows_ in runs["plain-1"] for r in rows_ if r["round"] > 1]
        )
        sim_client = median([row[4] for row in rows])
        print(
            f"sum of client training per round: plain 1-thread {plain_client:.3f} s, in actors {sim_client:.3f} s "
            f"(ratio {sim_client / plain_client:.3f})"
        )

    # same work? accuracy per round
    acc_sim = [r["test_accuracy"] for r in _metrics(cfg)]
    acc_p1 = [r["accuracy"] for r in runs["plain-1"][-1]]
    acc_pd = [r["accuracy"] for r in runs["plain-default"][-1]] if runs["plain-default"] else []
    print()
    print("check, test accuracy per round: sim " + " ".join(f"{a:.4f}" for a in acc_sim))
    print("                         plain 1 thread " + " ".join(f"{a:.4f}" for a in acc_p1))
    print(f"                         plain {default_threads} threads " + " ".join(f"{a:.4f}" for a in acc_pd))
    print()
    print(f"load average per repeat start: {' | '.join(loads)}; at end: {common.load_average()}")
    return 0


def _metrics(cfg) -> list[dict]:
    import json
    from pathlib import Path

    return [json.loads(line) for line in (Path(cfg.run_dir) / "metrics.jsonl").read_text().splitlines()]


if __name__ == "__main__":
    sys.exit(main())
