"""Where a round of the processes mode goes: CPU seconds of the driver and of each worker, by part.

    .venv/bin/python benchmarks/bench_round_cpu.py                      # the MLP, 10 clients of 200 images a round
    .venv/bin/python benchmarks/bench_round_cpu.py --per-round 100 --model cnn

A run of the batched engine's default on the CPU (`processes`) made in this process, its parts
timed by the CPU time of the thread that runs them (time.thread_time), so a part's figure is the
work it did, not the waits around it and, mostly, not the load beside it. The parts are the
methods named in the table, wrapped for the run (what they compute is left as it is): on the
driver, a round's messages, the exchange with the workers (sending, receiving, joining the
parts; the wait itself costs no CPU), the rest of the batched grid (the replies), the
aggregation and the checkpoint; in each worker (forked from this process, so it inherits the
wrapping), the cohort's preparation, its clients' training, stacking and the shared slots. Beside
them, the same clients trained by benchmarks/plain.py's textbook loop in this process, on one
thread: what a client costs without the engine. Figures are means over the run's rounds (the
first included: its slots are made; the last evaluates the global model, outside every part).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import report  # noqa: F401  (puts the repository root on sys.path)
import torch

FMNIST_TRAIN = 60_000
CPU: dict[str, float] = collections.defaultdict(float)  # part -> CPU seconds in this process
DRIVER_PARTS = {  # (module, class, method) -> the part's name in the table
    ("fedpfn.runtime.server", "ServerLoop", "train_messages"): "the round's messages",
    ("fedpfn.runtime.engines.processes", "ProcessRunner", "__call__"): "exchange with the workers",
    ("fedpfn.runtime.engines.grid", "BatchedGrid", "_train_cohort"): "the grid (the exchange included)",
    ("fedpfn.runtime.server", "ServerLoop", "aggregate"): "aggregation",
    ("fedpfn.runtime.server", "ServerLoop", "checkpoint"): "the checkpoint's bytes",
    ("fedpfn.runtime.server", "ServerLoop", "train_round"): "a round (the parts above but the checkpoint)",
}
WORKER_PARTS = {
    ("fedpfn.runtime.engines.prepared", "PreparedCohort", "__post_init__"): "preparing the cohort",
    ("fedpfn.runtime.engines.sequential", None, "train_one"): "training its clients",
    ("fedpfn.runtime.engines.sequential", None, "_stacked"): "stacking them",
    ("fedpfn.runtime.engines.slots", "Slots", "write"): "writing the shared slots",
}


def timed(function: Callable[..., Any], part: str) -> Callable[..., Any]:
    """`function`, its calls' thread CPU time added to CPU[part]."""

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        began = time.thread_time()
        try:
            return function(*args, **kwargs)
        finally:
            CPU[part] += time.thread_time() - began

    return wrapper


def wrap(parts: dict[tuple[str, str | None, str], str]) -> None:
    import importlib

    for (module_name, class_name, method), part in parts.items():
        module = importlib.import_module(module_name)
        owner = getattr(module, class_name) if class_name else module
        setattr(owner, method, timed(getattr(owner, method), part))


def worker_totals(folder: Path) -> None:
    """Each worker writes CPU (and its own total) into `folder` when it stops."""
    from fedpfn.runtime.engines import processes

    serve = processes._serve

    def timed_serve(*args: Any) -> None:
        began = time.thread_time()
        try:
            serve(*args)
        finally:
            CPU["the worker in all"] = time.thread_time() - began
            (folder / f"worker-{os.getpid()}.json").write_text(json.dumps(CPU))

    processes._serve = timed_serve


def flags(args: argparse.Namespace, out: Path) -> list[str]:
    clients = max(args.per_round, FMNIST_TRAIN // args.samples)
    return [
        "--model", args.model, "--num-clients", str(clients), "--clients-per-round", str(args.per_round),
        "--rounds", str(args.rounds), "--partition", "iid", "--batch-size", "50", "--local-epochs", "1",
        "--eval-every", str(args.rounds), "--min-partition-size", "1", "--engine", "batched",
        "--engine-mode", "processes", "--out", str(out),
    ]  # fmt: skip


def plain_client_cpu(argv: list[str], clients: int) -> float:
    """Thread CPU seconds a client costs in benchmarks/plain.py's loop, one thread, round 1's clients."""
    import plain

    from fedpfn.core.cache import initial_model
    from fedpfn.runtime.algorithms import load_config
    from strategies import sample_clients

    cfg = load_config({key.removeprefix("--"): value for key, value in zip(argv[::2], argv[1::2])})
    state = {k: v.detach().clone() for k, v in initial_model(cfg).state_dict().items()}
    chosen = sample_clients(cfg.seed, 1, cfg.federation.num_clients, cfg.federation.clients_per_round)[:clients]
    with plain.torch_threads(1):
        plain.train_client(cfg, state, 1, chosen[0], torch.device("cpu"))  # torch.optim's first use imports
        began = time.thread_time()
        for pid in chosen:
            plain.train_client(cfg, state, 1, pid, torch.device("cpu"))
        return (time.thread_time() - began) / len(chosen)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="mlp")
    ap.add_argument("--per-round", type=int, default=10, help="clients a round")
    ap.add_argument("--samples", type=int, default=200, help="images a client")
    ap.add_argument("--rounds", type=int, default=30)
    args = ap.parse_args()
    if args.per_round < 2 or args.rounds < 2 or not 1 <= args.samples <= FMNIST_TRAIN:
        ap.error("--per-round and --rounds must be at least 2, --samples within 1..60000")
    from fedpfn.cli.early import stop_cleanly_from_now

    stop_cleanly_from_now()
    from fedpfn.cli.simulate import main as run

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        argv = flags(args, folder / "run")
        wrap(DRIVER_PARTS)
        wrap(WORKER_PARTS)
        worker_totals(folder)
        report.print_header("bench_round_cpu: where a round of the processes mode goes, in CPU", vars(args))
        if run(argv) != 0:
            raise SystemExit("the run failed")
        driver = dict(CPU)
        workers = [json.loads(p.read_text()) for p in sorted(folder.glob("worker-*.json"))]
        plain_seconds = plain_client_cpu(argv, min(args.per_round, 20))
    print_table(args, driver, workers, plain_seconds)


def print_table(args: argparse.Namespace, driver: dict[str, float], workers: list[dict[str, float]], plain_seconds: float) -> None:
    rounds, per_worker = args.rounds, args.per_round / max(len(workers), 1)
    print(f"\n{args.model}, {args.per_round} clients a round of {args.samples} images, {len(workers)} workers, "
          f"{rounds} rounds: thread CPU, ms a round (means)")  # fmt: skip
    rows = [("driver", part, 1e3 * driver.get(part, 0.0) / rounds) for part in DRIVER_PARTS.values()]
    for k, worker in enumerate(workers):
        for part in [*WORKER_PARTS.values(), "the worker in all"]:
            rows.append((f"worker {k}", part, 1e3 * worker.get(part, 0.0) / rounds))
    width = max(len(part) for _, part, _ in rows)
    for who, part, ms in rows:
        print(f"  {who:9s} {part:{width}s} {ms:8.2f}")
    trained = [1e3 * w.get("training its clients", 0.0) / rounds / per_worker for w in workers]
    print(f"  a client in a worker (training its clients / its clients): {', '.join(f'{t:.2f}' for t in trained)} ms; "
          f"in benchmarks/plain.py's loop, one thread: {1e3 * plain_seconds:.2f} ms")  # fmt: skip
    print(f"load average at end: {report.load_average()}")


if __name__ == "__main__":
    main()
