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

import common
from common import median, mib, spread, table


def run_one(num_clients: int, args) -> tuple[common.SimTiming, common.TreeMemory]:
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
    ap.add_argument("--quiet-load", type=float, default=0.0, help="wait for 1-min load below this first")
    args = ap.parse_args(argv)
    for n in (args.large, args.small):
        if 60_000 % n or n < args.per_round:
            ap.error(f"{n} clients: must divide 60,000 and be >= --per-round")
    common.print_header(
        f"bench_scale: {args.large} clients vs {args.small} clients, {args.per_round} per round",
        {
            "model": args.model,
            "partition": "iid",
            "batch": 60,
            "steps per client per round": 100,
            "rounds": args.rounds,
            "repeats": args.repeats,
        },
    )
    common.wait_for_quiet(args.quiet_load, 600)
    results: dict[int, list[dict]] = {args.small: [], args.large: []}
    loads = []
    for rep in range(args.repeats):
        for n in (args.small, args.large):
            loads.append(f"{n}: {common.load_average()}")
            sim, mem = run_one(n, args)
            results[n].append(summarise(sim, mem))
            print(f"   repeat {rep + 1}, {n} clients done (total {sim.total:.1f} s), load {common.load_average()}", flush=True)

    def med(n: int, key: str) -> float:
        return median(r[key] for r in results[n])

    S, L = args.small, args.large
    rows = []
    for label, key, scale, fmt in (
        ("steady s/round", "steady_s", 1, "{:.3f}"),
        ("driver CPU s/round", "driver_cpu", 1, "{:.3f}"),
        ("peak RSS, whole run (MiB)", "peak_rss", 2**20, "{:.0f}"),
        ("peak RSS, steady rounds (MiB)", "steady_rss", 2**20, "{:.0f}"),
        ("peak anon RSS, whole run (MiB)", "peak_anon", 2**20, "{:.0f}"),
        ("peak anon RSS, steady (MiB)", "steady_anon", 2**20, "{:.0f}"),
    ):
        s, l_ = med(S, key) / scale, med(L, key) / scale
        rows.append([label, fmt.format(s), fmt.format(l_), f"{l_ / s:.3f}" if s else "-"])
    print()
    print(f"medians over {args.repeats} repeat(s); steady = rounds 2..{args.rounds}")
    print(table(["", f"{S} clients", f"{L} clients", f"{L}/{S}"], rows))
    print(f"steady s/round, all rounds: {S}: {spread([x for r in results[S] for x in r['steady_all']])}, "
          f"{L}: {spread([x for r in results[L] for x in r['steady_all']])}")
    for n in (S, L):
        r = results[n][-1]
        print(f"{n} clients, RSS by process role at the steady peak ({r['procs']} processes): "
              + ", ".join(f"{k} {mib(v):.0f}" for k, v in sorted(r["roles"].items())) + " MiB")
    t_ratio = med(L, "steady_s") / med(S, "steady_s")
    m_ratio = med(L, "steady_rss") / med(S, "steady_rss")
    print(f"targets <= 1.2: time {t_ratio:.3f} ({'meets' if t_ratio <= 1.2 else 'misses'}), "
          f"memory (steady peak RSS) {m_ratio:.3f} ({'meets' if m_ratio <= 1.2 else 'misses'})")

    print()
    print("start-up phases (seconds, last repeat)")
    hdr = ["clients", "total", "checks+folder", "server init", "node wait", "discover", "->round 1", "round 1", "teardown"]
    print(table(hdr, [[n, r["sim"].total, r["sim"].checks_and_folder, r["sim"].server_init, r["sim"].node_wait,
                       r["sim"].discover, r["sim"].start_to_round1, r["sim"].rounds[0]["seconds"], r["sim"].teardown]
                      for n in (S, L) for r in results[n][-1:]]))
    print()
    print("discover_partitions seen from the actors (last repeat)")
    print(table(["clients", "queries", "actors", "inside query()", "nodes ready->1st reply", "1st->last reply", "last->return"],
                [[n, q.get("queries", 0), q.get("actors", 0), q.get("in_query_s", float("nan")),
                  q.get("to_first_reply_s", float("nan")), q.get("first_to_last_s", float("nan")),
                  q.get("last_to_return_s", float("nan"))]
                 for n in (S, L) for q in [results[n][-1]["query"]]]))
    print()
    print("steady rounds: where the time goes (seconds, medians)")
    print(table(["clients", "round", "train phase", "evaluate", "sum client fit", "busiest actor", "train - busiest"],
                [[n] + [median(b[k] for r in results[n] for b in r["breakdown"])
                        for k in ("seconds", "train", "evaluate", "client_fit", "busiest", "overhead")]
                 for n in (S, L)]))
    print()
    print("load average per run start: " + " | ".join(loads) + f"; at end: {common.load_average()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
