"""Federation size: 1,000 clients with 10 per round against 10 clients with 10 per round.

    .venv/bin/python benchmarks/bench_scale.py                      # CNN, 4 rounds each
    .venv/bin/python benchmarks/bench_scale.py --repeats 2
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

Reported per federation: start-up phases (Ray, node registration, `discover_partitions`
with one query per node), steady seconds per round (round 1 left out), driver CPU
seconds per round (the Flower polling threads live in the driver), and the peak of the
summed RSS (and anonymous RSS) of the driver and all its descendants (Ray core processes,
actors, idle workers), sampled every 0.2 s, over the whole run and over the steady rounds.
"""

from __future__ import annotations

import argparse
import sys
import time
from contextlib import ExitStack, contextmanager

import common
from common import median, mib, spread, table

# --- experimental changes, measured as variants of the large federation -----------------
# Neither is applied to the code under test unless a variant names it; both only swap a
# function for the length of one simulate() call.


def fast_add_messages_to_queue(state, queue, nodes_mapping, f_stop):
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
        if waiting:
            for node_id in nodes_mapping:
                if node_id in waiting:
                    for msg in state.get_message_ins(node_id=node_id, limit=1):
                        queue.put(msg)
        f_stop.wait(0.1)


@contextmanager
def fast_extractor():
    from flwr.server.superlink.fleet.vce import vce_api

    original = vce_api.add_messages_to_queue
    vce_api.add_messages_to_queue = fast_add_messages_to_queue
    try:
        yield
    finally:
        vce_api.add_messages_to_queue = original


def chunked_discover_partitions(grid, num_clients: int, chunk: int = 64) -> dict[int, int]:
    """fedpfn.server.discover_partitions with at most `chunk` queries in flight."""
    from flwr.app import Message, MessageType, RecordDict

    from fedpfn.server import NODE_WAIT_SECONDS, FederationError

    deadline = time.monotonic() + NODE_WAIT_SECONDS
    while len(node_ids := list(grid.get_node_ids())) < num_clients:
        if time.monotonic() > deadline:
            raise FederationError(f"only {len(node_ids)} of {num_clients} nodes connected")
        time.sleep(1.0)
    mapping: dict[int, int] = {}
    for start in range(0, len(node_ids), chunk):
        queries = [
            Message(content=RecordDict(), dst_node_id=n, message_type=MessageType.QUERY)
            for n in node_ids[start : start + chunk]
        ]
        for reply in grid.send_and_receive(queries, timeout=NODE_WAIT_SECONDS):
            if reply.has_error():
                raise FederationError(f"node {reply.metadata.src_node_id} failed: {reply.error.reason}")
            mapping[int(reply.content.config_records["node"]["partition-id"])] = reply.metadata.src_node_id
    missing = sorted(set(range(num_clients)) - set(mapping))
    if missing:
        raise FederationError(f"no node holds partition(s) {missing[:10]}")
    return mapping


@contextmanager
def chunked_discover():
    from fedpfn import server

    original = server.discover_partitions
    server.discover_partitions = chunked_discover_partitions
    try:
        yield
    finally:
        server.discover_partitions = original


VARIANTS = {
    "base": (),
    "fast-extractor": (fast_extractor,),
    "chunked-discover": (chunked_discover,),
    "both": (fast_extractor, chunked_discover),
}


ANATOMY = r"""
import os, sys, time
def rss():
    with open("/proc/self/statm") as fh:
        f = fh.read().split()
    return int(f[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20, (int(f[1]) - int(f[2])) * os.sysconf("SC_PAGE_SIZE") / 2**20
out = [("python", *rss())]
import torch, flwr.clientapp, flwr.app
import fedpfn.app
out.append(("+ torch, flwr, fedpfn.app", *rss()))
from fedpfn.config import RunConfig
from fedpfn.workspace import dataset_on, client_indices
cfg = RunConfig(num_clients=int(sys.argv[1]), partition="iid")
d = dataset_on(cfg, torch.device("cpu"))
out.append(("+ dataset (float32, cached)", *rss()))
client_indices(cfg)
out.append(("+ partition indices", *rss()))
n = sum(t.numel() * t.element_size() for t in (d.train_x, d.train_y, d.test_x, d.test_y))
print("tensors MiB", n / 2**20, "train_x MiB", d.train_x.numel() * d.train_x.element_size() / 2**20)
for name, r, a in out:
    print(f"{name}: RSS {r:.0f} MiB, anon {a:.0f} MiB")
"""


def anatomy(num_clients: int) -> str:
    """RSS of one fresh process, step by step as an actor builds up (a subprocess)."""
    import subprocess

    res = subprocess.run(
        [sys.executable, "-c", ANATOMY, str(num_clients)], capture_output=True, text=True, check=False
    )
    return (res.stdout + res.stderr[-2000:]).strip()


def run_one(num_clients: int, args, variant: str = "base") -> tuple[common.SimTiming, common.TreeMemory]:
    samples = 60_000 // num_clients  # iid: every client holds exactly this many
    epochs = max(1, (60_000 // args.small) // samples)  # same images per round as the small one
    cfg = common.bench_config(
        algorithm="fedavg",
        model=args.model,
        num_clients=num_clients,
        clients_per_round=args.per_round,
        rounds=args.rounds,
        partition="iid",
        batch_size=60,
        local_epochs=epochs,
        client_cpus=args.client_cpus,
    )
    mem = common.TreeMemory(interval=0.2)
    with ExitStack() as stack:
        for patch in VARIANTS[variant]:
            stack.enter_context(patch())
        with mem:
            sim = common.timed_simulation(cfg, trace=True, memory=mem)
    return sim, mem


def summarise(sim: common.SimTiming, mem: common.TreeMemory) -> dict:
    st = common.steady(sim.rounds)
    steady_start = next((r["start"] for r in sim.rounds if r["round"] == 2), float("nan"))
    steady_end = sim.rounds[-1]["end"]
    peak_all = mem.peak()
    peak_steady = mem.peak(steady_start, steady_end)
    return {
        "steady_s": median(st),
        "steady_all": st,
        "driver_cpu": median(sim.driver_cpu[1:]),
        "peak_rss": peak_all.rss if peak_all else 0,
        "peak_anon": mem.peak_anon(),
        "steady_rss": peak_steady.rss if peak_steady else 0,
        "steady_anon": mem.peak_anon(steady_start, steady_end),
        "roles": peak_steady.by_role if peak_steady else {},
        "procs": peak_steady.processes if peak_steady else 0,
        "sim": sim,
        "breakdown": common.round_breakdown(sim),
        "query": common.query_profile(sim),
        "threads": sim.thread_cpu[1:],
        "startup": sim.start_to_round1,
        "discover": sim.node_wait + sim.discover,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--large", type=int, default=1000, help="clients in the large federation")
    ap.add_argument("--small", type=int, default=10, help="clients in the small federation")
    ap.add_argument("--per-round", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=4, help="round 1 is not counted")
    ap.add_argument("--repeats", type=int, default=1, help="interleaved repetitions (small, large, ...)")
    ap.add_argument("--model", default="cnn")
    ap.add_argument("--client-cpus", type=float, default=1.0)
    ap.add_argument(
        "--variants",
        default="base",
        help=f"comma list of large-federation variants, first one is the reference: {', '.join(VARIANTS)}",
    )
    ap.add_argument("--quiet-load", type=float, default=0.0, help="wait for 1-min load below this first")
    args = ap.parse_args(argv)
    for n in (args.large, args.small):
        if 60_000 % n or n < args.per_round:
            ap.error(f"{n} clients: must divide 60,000 and be >= --per-round")
    variants = args.variants.split(",")
    for v in variants:
        if v not in VARIANTS:
            ap.error(f"unknown variant {v}; use {', '.join(VARIANTS)}")
    common.print_header(
        f"bench_scale: {args.large} clients vs {args.small} clients, {args.per_round} per round",
        {
            "model": args.model,
            "partition": "iid",
            "batch": 60,
            "images per client per round": 60_000 // args.small,
            "rounds": args.rounds,
            "repeats": args.repeats,
            "variants": variants,
        },
    )
    common.wait_for_quiet(args.quiet_load, 600)
    S = str(args.small)
    runs = [(S, args.small, "base")] + [
        (str(args.large) if v == "base" else f"{args.large} {v}", args.large, v) for v in variants
    ]
    labels = [r[0] for r in runs]
    L = labels[1]
    results: dict[str, list[dict]] = {label: [] for label in labels}
    loads = []
    for rep in range(args.repeats):
        for label, n, variant in runs:
            loads.append(f"{label}: {common.load_average()}")
            sim, mem = run_one(n, args, variant)
            results[label].append(summarise(sim, mem))
            print(
                f"   repeat {rep + 1}, {label} done (total {sim.total:.1f} s), load {common.load_average()}",
                flush=True,
            )

    def med(label: str, key: str) -> float:
        return median(r[key] for r in results[label])

    print()
    print(
        f"medians over {args.repeats} repeat(s); steady = rounds 2..{args.rounds}; ratios against {S} clients"
    )
    rows = []
    for title, key, scale, fmt in (
        ("steady s/round", "steady_s", 1, "{:.3f}"),
        ("driver CPU s/round", "driver_cpu", 1, "{:.3f}"),
        ("peak RSS, whole run (MiB)", "peak_rss", 2**20, "{:.0f}"),
        ("peak RSS, steady rounds (MiB)", "steady_rss", 2**20, "{:.0f}"),
        ("peak anon RSS, whole run (MiB)", "peak_anon", 2**20, "{:.0f}"),
        ("peak anon RSS, steady (MiB)", "steady_anon", 2**20, "{:.0f}"),
        ("start -> round 1 (s)", "startup", 1, "{:.1f}"),
        ("discover_partitions (s)", "discover", 1, "{:.1f}"),
    ):
        ref = med(S, key) / scale
        row = [title, fmt.format(ref)]
        for label in labels[1:]:
            v = med(label, key) / scale
            row += [fmt.format(v), f"{v / ref:.3f}" if ref else "-"]
        rows.append(row)
    hdr = [""] + [f"{S} clients"] + [h for label in labels[1:] for h in (label, "ratio")]
    print(table(hdr, rows))
    for label in labels:
        print(
            f"steady s/round, all rounds, {label}: {spread([x for r in results[label] for x in r['steady_all']])}"
        )
    t_ratio = med(L, "steady_s") / med(S, "steady_s")
    m_ratio = med(L, "steady_rss") / med(S, "steady_rss")
    print(
        f"targets <= 1.2 ({L} / {S}): time {t_ratio:.3f} ({'meets' if t_ratio <= 1.2 else 'misses'}), "
        f"memory (steady peak RSS) {m_ratio:.3f} ({'meets' if m_ratio <= 1.2 else 'misses'})"
    )
    for label in labels:
        r = results[label][-1]
        print(
            f"{label}: RSS by process role at the steady peak ({r['procs']} processes): "
            + ", ".join(f"{k} {mib(v):.0f}" for k, v in sorted(r["roles"].items()))
            + " MiB"
        )

    print()
    print("driver CPU seconds per steady round, by thread (medians)")
    names = sorted({k for label in labels for r in results[label] for t in r["threads"] for k in t})
    print(
        table(["thread"] + labels, [[n] + [med_thread(results[label], n) for label in labels] for n in names])
    )

    print()
    print("start-up phases (seconds, last repeat)")
    hdr = [
        "run",
        "total",
        "checks+folder",
        "server init",
        "node wait",
        "discover",
        "->round 1",
        "round 1",
        "teardown",
    ]
    print(
        table(
            hdr,
            [
                [
                    label,
                    r["sim"].total,
                    r["sim"].checks_and_folder,
                    r["sim"].server_init,
                    r["sim"].node_wait,
                    r["sim"].discover,
                    r["sim"].start_to_round1,
                    r["sim"].rounds[0]["seconds"],
                    r["sim"].teardown,
                ]
                for label in labels
                for r in results[label][-1:]
            ],
        )
    )
    print()
    print("discover_partitions seen from the actors, and the driver CPU it took (last repeat)")
    print(
        table(
            [
                "run",
                "queries",
                "actors",
                "inside query()",
                "ready->1st reply",
                "1st->last reply",
                "last->return",
                "driver CPU",
                "extractor CPU",
            ],
            [
                [
                    label,
                    q.get("queries", 0),
                    q.get("actors", 0),
                    q.get("in_query_s", float("nan")),
                    q.get("to_first_reply_s", float("nan")),
                    q.get("first_to_last_s", float("nan")),
                    q.get("last_to_return_s", float("nan")),
                    c.get("total", float("nan")),
                    c.get("add_messages_to_queue", float("nan")),
                ]
                for label in labels
                for q, c in [(results[label][-1]["query"], results[label][-1]["sim"].discover_cpu)]
            ],
        )
    )
    print()
    print("steady rounds: where the time goes (seconds, medians)")
    print(
        table(
            ["run", "round", "train phase", "evaluate", "sum client fit", "busiest actor", "train - busiest"],
            [
                [label]
                + [
                    median(b[k] for r in results[label] for b in r["breakdown"])
                    for k in ("seconds", "train", "evaluate", "client_fit", "busiest", "overhead")
                ]
                for label in labels
            ],
        )
    )
    print()
    print("one process's memory, step by step (what every actor and the driver carry):")
    print(anatomy(args.large))
    print()
    print("load average per run start: " + " | ".join(loads) + f"; at end: {common.load_average()}")
    return 0


def med_thread(results: list[dict], name: str) -> float:
    return median(t.get(name, 0.0) for r in results for t in r["threads"])


if __name__ == "__main__":
    sys.exit(main())
