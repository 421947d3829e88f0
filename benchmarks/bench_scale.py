"""Federation size: 1,000 clients with 10 per round against 10 clients with 10 per round.

    .venv/bin/python benchmarks/bench_scale.py                      # CNN, 4 rounds each
    .venv/bin/python benchmarks/bench_scale.py --variants base,fast-extractor --rounds 3
    .venv/bin/python benchmarks/bench_scale.py --model mlp --rounds 3   # quick

The two federations do the same work per round, so any difference is the cost of the
federation's size itself (nodes, contexts, messages, polling), not of training:

- `iid` partitions of the 60,000 Fashion-MNIST images: every client of the 1,000 holds
  exactly 60 images, every client of the 10 holds exactly 6,000.
- batch size 60 on both; the 1,000-client federation trains 100 local epochs (100 steps
  of 60 images), the 10-client one 1 epoch (100 steps of 60 images). Each round thus
  trains 10 clients x 100 steps x 60 images on both sides, from the same model.
- every process holds the whole dataset in both cases (clients index it), so data in
  memory is the same too.

Reported per federation: start-up phases (Ray, node registration, the partition queries:
one per node, `fedpfn.runtime.transport.NodeDirectory`), steady seconds per round (round 1 left
out), driver CPU seconds per round by thread (Flower's polling threads live in the
driver), and the peak of the summed RSS (and anonymous RSS) of the driver and all its
descendants (Ray core processes, actors, idle workers), sampled every 0.2 s, over the
whole run and over the steady rounds.

`--variants` adds runs of the large federation with one change, for that run only:
  fast-extractor    Flower's simulation extractor swapped for `fast_add_messages_to_queue`
                    below (a private Flower function, restored after the run)
  chunked-discover  the partition queries sent 64 at a time (simulation.TimedDirectory)
  both              the two together
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from typing import Any

from memory import TreeMemory
from report import load_average, median, mib, print_header, ratio, spread, table, wait_for_quiet
from simulation import BREAKDOWN, bench_config, query_profile, steady, timed_simulation

IMAGES = 60_000
TARGET = 1.2  # large / small federation, steady time and steady peak memory
CHUNK = 64  # queries in flight at once for chunked-discover


def fast_add_messages_to_queue(state, queue, nodes_mapping, f_stop) -> None:  # noqa: ANN001 (Flower's)
    """Flower's simulation extractor, asking only nodes that have an undelivered message.

    Flower's loop (flwr/server/superlink/fleet/vce/vce_api.py) calls
    `state.get_message_ins(node_id, limit=1)` for every registered node every 0.1 s, and
    the in-memory LinkState answers each call by scanning (and validating) every stored
    message: O(nodes x stored messages) per pass. Same messages, same validation
    (get_message_ins is still what hands a message out), same order of nodes.
    """
    while not f_stop.is_set():
        with state.lock:
            waiting = {
                m.metadata.dst_node_id
                for m in state.message_ins_store.values()
                if m.metadata.delivered_at == ""
            }
        for node_id in nodes_mapping:
            if node_id in waiting:
                for msg in state.get_message_ins(node_id=node_id, limit=1):
                    queue.put(msg)
        f_stop.wait(0.1)


@contextmanager
def fast_extractor() -> Iterator[None]:
    from flwr.server.superlink.fleet.vce import vce_api

    original = vce_api.add_messages_to_queue
    vce_api.add_messages_to_queue = fast_add_messages_to_queue
    try:
        yield
    finally:
        vce_api.add_messages_to_queue = original


VARIANTS = {  # name -> (swap Flower's extractor, queries in flight at once: 0 = all)
    "base": (False, 0),
    "fast-extractor": (True, 0),
    "chunked-discover": (False, CHUNK),
    "both": (True, CHUNK),
}

ANATOMY = r"""
import os, sys
def rss():
    with open("/proc/self/statm") as fh:
        f = fh.read().split()
    page = os.sysconf("SC_PAGE_SIZE") / 2**20
    return int(f[1]) * page, (int(f[1]) - int(f[2])) * page
out = [("python", *rss())]
import torch, flwr.clientapp, flwr.app
import fedpfn.runtime.app
out.append(("+ torch, flwr, fedpfn.runtime.app", *rss()))
from fedpfn.runtime.algorithms import load_config
from fedpfn.core.cache import dataset_on, client_indices
cfg = load_config({"num_clients": int(sys.argv[1]), "partition": "iid"})
d = dataset_on(cfg, torch.device("cpu"))
out.append(("+ dataset (float32, cached)", *rss()))
client_indices(cfg)
out.append(("+ partition indices", *rss()))
tensors = (d.train_x, d.train_y, d.test_x, d.test_y)
print("tensors MiB", sum(t.numel() * t.element_size() for t in tensors) / 2**20)
for name, r, a in out:
    print(f"{name}: RSS {r:.0f} MiB, anon {a:.0f} MiB")
"""


def anatomy(num_clients: int) -> str:
    """RSS of one fresh process, step by step as an actor builds up (a subprocess)."""
    cmd = [sys.executable, "-c", ANATOMY, str(num_clients)]
    res = subprocess.run(cmd, capture_output=True, text=True, check=False)
    return (res.stdout + res.stderr[-2000:]).strip()


def run_one(num_clients: int, args: argparse.Namespace, variant: str) -> dict[str, Any]:
    """One federation, timed and its memory sampled; the figures `print_*` read."""
    samples = IMAGES // num_clients  # iid: every client holds exactly this many
    cfg = bench_config(
        algorithm="fedavg", model=args.model, num_clients=num_clients, clients_per_round=args.per_round,
        rounds=args.rounds, partition="iid", batch_size=60, client_cpus=args.client_cpus,
        local_epochs=max(1, (IMAGES // args.small) // samples),  # the small federation's images per round
    )  # fmt: skip
    swap, chunk = VARIANTS[variant]
    with TreeMemory(interval=0.2) as mem, fast_extractor() if swap else nullcontext():
        sim = timed_simulation(cfg, trace=True, chunk=chunk)
    rounds = steady(sim)
    since, until = rounds[0].start, rounds[-1].end
    peak = mem.peak(since, until)
    return {
        "sim": sim,
        "steady_s": median(r.seconds for r in rounds),
        "steady_all": [r.seconds for r in rounds],
        "driver_cpu": median(r.driver_cpu["total"] for r in rounds),
        "threads": [r.driver_cpu for r in rounds],
        "peak_rss": mem.peak().rss,
        "peak_anon": mem.peak_anon(),
        "steady_rss": peak.rss if peak else 0,
        "steady_anon": mem.peak_anon(since, until),
        "roles": peak.by_role if peak else {},
        "procs": peak.processes if peak else 0,
        "startup": sim.phases["->round 1"],
        "discover": sim.phases["discover"],
    }


SUMMARY_ROWS = (  # title, key, unit, format
    ("steady s/round", "steady_s", 1, "{:.3f}"),
    ("driver CPU s/round", "driver_cpu", 1, "{:.3f}"),
    ("peak RSS, whole run (MiB)", "peak_rss", 2**20, "{:.0f}"),
    ("peak RSS, steady rounds (MiB)", "steady_rss", 2**20, "{:.0f}"),
    ("peak anon RSS, whole run (MiB)", "peak_anon", 2**20, "{:.0f}"),
    ("peak anon RSS, steady (MiB)", "steady_anon", 2**20, "{:.0f}"),
    ("start -> round 1 (s)", "startup", 1, "{:.1f}"),
    ("discover (s)", "discover", 1, "{:.1f}"),
)


Results = dict[str, list[dict[str, Any]]]  # run label -> one dict of figures per repeat


def _med(results: Results, label: str, key: str) -> float:
    return median(r[key] for r in results[label])


def print_summary(results: Results, labels: list[str], repeats: int) -> None:
    """Medians over repeats, each large-federation run as a ratio to the small one."""
    small, large = labels[0], labels[1]
    rows = []
    for title, key, unit, fmt in SUMMARY_ROWS:
        ref = _med(results, small, key) / unit
        row = [title, fmt.format(ref)]
        for label in labels[1:]:
            value = _med(results, label, key) / unit
            row += [fmt.format(value), ratio(value, ref)]
        rows.append(row)
    print(f"\nmedians over {repeats} repeat(s); steady = rounds 2..; ratios against {small} clients")
    print(table(["", f"{small} clients", *(h for label in labels[1:] for h in (label, "ratio"))], rows))
    for label in labels:
        seconds = [x for r in results[label] for x in r["steady_all"]]
        print(f"steady s/round, all rounds, {label}: {spread(seconds)}")
    for what, key in (("time", "steady_s"), ("memory (steady peak RSS)", "steady_rss")):
        value = _med(results, large, key) / _med(results, small, key)
        verdict = "meets" if value <= TARGET else "misses"
        print(f"target <= {TARGET} ({large} / {small}): {what} {value:.3f}, {verdict}")
    for label in labels:
        r = results[label][-1]
        by_role = ", ".join(f"{k} {mib(v):.0f}" for k, v in sorted(r["roles"].items()))
        print(f"{label}: RSS by process role at the steady peak ({r['procs']} processes): {by_role} MiB")


def print_threads(results: Results, labels: list[str]) -> None:
    print("\ndriver CPU seconds per steady round, by thread (medians)")
    names = sorted({k for label in labels for r in results[label] for t in r["threads"] for k in t})
    rows = []
    for name in names:
        per_run = (median(t.get(name, 0.0) for r in results[label] for t in r["threads"]) for label in labels)
        rows.append([name, *per_run])
    print(table(["thread", *labels], rows))


QUERY_KEYS = (
    "queries", "actors", "in_query_s", "wait_s", "to_first_reply_s", "first_to_last_s", "last_to_return_s",
)  # fmt: skip


def print_startup(results: Results, labels: list[str]) -> None:
    """Start-up phases and the partition queries seen from the actors (last repeat)."""
    last = {label: results[label][-1]["sim"] for label in labels}
    print("\nstart-up phases (seconds, last repeat)")
    rows = [[label, sim.total, *sim.phases.values()] for label, sim in last.items()]
    print(table(["run", "total", *last[labels[0]].phases], rows))
    print("\npartition queries seen from the actors, and the driver CPU they took (last repeat)")
    nan = float("nan")
    rows = []
    for label, sim in last.items():
        q, cpu = query_profile(sim), sim.clock.discover_cpu
        queries = [q.get(k, nan) for k in QUERY_KEYS]
        extractor = sum(v for k, v in cpu.items() if k.endswith("add_messages_to_queue"))  # either version
        rows.append([label, *queries, cpu.get("total", nan), extractor])
    print(table(["run", *QUERY_KEYS, "driver CPU", "extractor CPU"], rows))


def print_rounds(results: Results, labels: list[str]) -> None:
    print("\nsteady rounds: where the time goes (seconds, medians)")
    rows = []
    for label in labels:
        columns = zip(*(x.breakdown() for r in results[label] for x in steady(r["sim"])))
        rows.append([label, *(median(column) for column in columns)])
    print(table(["run", *BREAKDOWN], rows))


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--large", type=int, default=1000, help="clients in the large federation")
    ap.add_argument("--small", type=int, default=10, help="clients in the small federation")
    ap.add_argument("--per-round", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=4, help="round 1 is not counted")
    ap.add_argument("--repeats", type=int, default=1, help="interleaved repetitions (small, large, ...)")
    ap.add_argument("--model", default="cnn")
    ap.add_argument("--client-cpus", type=float, default=1.0)
    ap.add_argument("--variants", default="base", help=f"comma list, large federation: {', '.join(VARIANTS)}")
    ap.add_argument("--quiet-load", type=float, default=0.0, help="wait for 1-min load below this first")
    args = ap.parse_args(argv)
    for n in (args.large, args.small):
        if IMAGES % n or n < args.per_round:
            ap.error(f"{n} clients: must divide 60,000 and be >= --per-round")
    if args.rounds < 2:
        ap.error("--rounds must be at least 2 (round 1 is start-up)")
    args.variants = args.variants.split(",")
    if unknown := [v for v in args.variants if v not in VARIANTS]:
        ap.error(f"unknown variant(s) {', '.join(unknown)}; use {', '.join(VARIANTS)}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    print_header(
        f"bench_scale: {args.large} clients vs {args.small} clients, {args.per_round} per round",
        {"model": args.model, "partition": "iid", "batch": 60, "rounds": args.rounds,
         "images per client per round": IMAGES // args.small, "repeats": args.repeats,
         "variants": args.variants},
    )  # fmt: skip
    wait_for_quiet(args.quiet_load)
    runs = [(str(args.small), args.small, "base")]
    runs += [(str(args.large) if v == "base" else f"{args.large} {v}", args.large, v) for v in args.variants]
    labels = [label for label, _, _ in runs]
    results: Results = {label: [] for label in labels}
    loads = []
    for rep in range(args.repeats):
        for label, n, variant in runs:
            loads.append(f"{label}: {load_average()}")
            results[label].append(run_one(n, args, variant))
            total = results[label][-1]["sim"].total
            print(f"   repeat {rep + 1}, {label} done ({total:.1f} s), load {load_average()}", flush=True)
    print_summary(results, labels, args.repeats)
    print_threads(results, labels)
    print_startup(results, labels)
    print_rounds(results, labels)
    print("\none process's memory, step by step (what every actor and the driver carry):")
    print(anatomy(args.large))
    print("\nload average per run start: " + " | ".join(loads) + f"; at end: {load_average()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
