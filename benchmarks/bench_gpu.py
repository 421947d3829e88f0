"""Clients sharing one GPU: client updates per second and peak GPU memory for k = 1, 2, 4, 8.

    .venv/bin/python benchmarks/bench_gpu.py                     # needs CUDA; exits 2 without
    .venv/bin/python benchmarks/bench_gpu.py --sizes 1,2,4,8 --rounds 5
    .venv/bin/python benchmarks/bench_gpu.py --cpu --sizes 1,2 --clients 20 --per-round 4 --rounds 2   # CPU path

For each k the real simulator runs (CNN, Fashion-MNIST, iid) with `client_gpus = 1/k`,
so Ray packs k actors on the one GPU, and `client_cpus` (default 1) low enough that the
CPUs never limit the number of actors. Every actor keeps the dataset on the GPU (it is
cached per process by `fedpfn.workspace.dataset_on`), the server evaluates on the GPU.

Reported per k:
- client updates per second over the steady rounds (round 1 left out: actors start,
  CUDA contexts, data copied to the GPU), for the whole round and for the train phase
  alone (send, local training, replies, aggregation; without the server's evaluation);
- per actor, `torch.cuda.max_memory_allocated()` and `max_memory_reserved()` read inside
  the actor after each update (the ClientApp is wrapped, see common.traced_client_app);
- the peak of nvidia-smi's used memory of the GPU during the run, minus what was used
  before it started (this includes every CUDA context: about 0.5 GiB per process), and
  per process where nvidia-smi's process ids match this machine's.

`--cpu` runs the same measurement without a GPU (`client_gpus = 0`, `client_cpus =
cores / k`, so k actors share the cores) and reports RSS instead: it exercises the script
on a machine without CUDA.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import threading
from typing import Self

import common
from common import median, mib, table

NO_CUDA_EXIT = 2


class NvidiaSmi:
    """Samples nvidia-smi's used memory (MiB) of one GPU, and per process, in a thread."""

    def __init__(self, gpu: int = 0, interval: float = 0.5) -> None:
        self.gpu, self.interval = gpu, interval
        self.total: list[int] = []
        self.per_pid: dict[int, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self.available = shutil.which("nvidia-smi") is not None

    def used(self) -> int | None:
        out = self._query(["--query-gpu=index,memory.used", "--format=csv,noheader,nounits"])
        for line in out.splitlines():
            parts = [p.strip() for p in line.split(",")]
            if len(parts) == 2 and parts[0] == str(self.gpu) and parts[1].isdigit():
                return int(parts[1])
        return None

    def _query(self, args: list[str]) -> str:
        if not self.available:
            return ""
        try:
            return subprocess.run(
                ["nvidia-smi", *args], capture_output=True, text=True, timeout=10, check=False
            ).stdout
        except (OSError, subprocess.SubprocessError):
            return ""

    def _loop(self) -> None:
        while not self._stop.is_set():
            used = self.used()
            if used is not None:
                self.total.append(used)
            for line in self._query(
                ["--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"]
            ).splitlines():
                parts = [p.strip() for p in line.split(",")]
                if len(parts) == 2 and parts[0].isdigit() and parts[1].isdigit():
                    pid, mem = int(parts[0]), int(parts[1])
                    self.per_pid[pid] = max(self.per_pid.get(pid, 0), mem)
            self._stop.wait(self.interval)

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def run_k(k: int, args, cuda: bool) -> dict:
    cpus = os.cpu_count() or 1
    client_cpus = args.client_cpus if cuda else max(cpus / k, 0.01)
    cfg = common.bench_config(
        algorithm="fedavg",
        model=args.model,
        num_clients=args.clients,
        clients_per_round=args.per_round,
        rounds=args.rounds,
        partition="iid",
        local_epochs=args.epochs,
        batch_size=args.batch,
        client_cpus=client_cpus,
        client_gpus=(1.0 / k) if cuda else 0.0,
    )
    smi = NvidiaSmi(args.gpu) if cuda else None
    before = smi.used() if smi else None
    mem = common.TreeMemory(interval=0.5)
    if smi:
        smi.__enter__()
    try:
        with mem:
            sim = common.timed_simulation(cfg, trace=True, memory=mem)
    finally:
        if smi:
            smi.__exit__()
    breakdown = common.round_breakdown(sim)
    seconds = sum(b["seconds"] for b in breakdown)
    train = sum(b["train"] for b in breakdown)
    updates = cfg.clients_per_round * len(breakdown)
    actors: dict[int, dict] = {}
    for t in sim.client_traces:
        if "round" not in t:
            continue
        a = actors.setdefault(t["pid"], {"updates": 0, "alloc": 0, "reserved": 0})
        a["updates"] += 1
        a["alloc"] = max(a["alloc"], t.get("cuda_max_allocated", 0))
        a["reserved"] = max(a["reserved"], t.get("cuda_max_reserved", 0))
    peak = mem.peak()
    return {
        "k": k,
        "client_cpus": client_cpus,
        "client_gpus": cfg.client_gpus,
        "actors": len(actors),
        "updates_per_s": updates / seconds if seconds else float("nan"),
        "train_updates_per_s": updates / train if train else float("nan"),
        "steady_round_s": median(b["seconds"] for b in breakdown),
        "actor_alloc_max": max((a["alloc"] for a in actors.values()), default=0),
        "actor_reserved_max": max((a["reserved"] for a in actors.values()), default=0),
        "actor_updates": sorted(a["updates"] for a in actors.values()),
        "smi_before": before,
        "smi_peak": max(smi.total) if smi and smi.total else None,
        "smi_per_pid": dict(smi.per_pid) if smi else {},
        "actor_pids": sorted(actors),
        "rss_peak": peak.rss if peak else 0,
        "startup": sim.start_to_round1,
        "round1": sim.rounds[0]["seconds"],
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="1,2,4,8", help="actors sharing the GPU (client_gpus = 1/k)")
    ap.add_argument("--clients", type=int, default=64)
    ap.add_argument("--per-round", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=4, help="round 1 is not counted")
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--model", default="cnn")
    ap.add_argument("--client-cpus", type=float, default=1.0, help="CPUs per actor on the GPU path")
    ap.add_argument("--gpu", type=int, default=0, help="nvidia-smi index of the GPU to watch")
    ap.add_argument("--cpu", action="store_true", help="no GPU: k actors share the CPU cores instead")
    args = ap.parse_args(argv)

    import torch

    cuda = torch.cuda.is_available() and not args.cpu
    if not cuda and not args.cpu:
        print(
            "bench_gpu: no CUDA device visible (torch.cuda.is_available() is False); nothing to "
            "measure. Run it on a CUDA machine, or pass --cpu to exercise the CPU path."
        )
        return NO_CUDA_EXIT
    sizes = [int(s) for s in args.sizes.split(",")]
    cpus = os.cpu_count() or 1
    if cuda and max(sizes) * args.client_cpus > cpus:
        ap.error(f"{max(sizes)} actors x {args.client_cpus} CPUs > {cpus} CPUs: lower --client-cpus")
    title = "bench_gpu: clients sharing one GPU" if cuda else "bench_gpu --cpu: clients sharing the CPU cores"
    settings = {
        "model": args.model,
        "clients": args.clients,
        "per_round": args.per_round,
        "rounds": args.rounds,
        "epochs": args.epochs,
        "batch": args.batch,
        "sizes": sizes,
    }
    if cuda:
        settings["gpu"] = torch.cuda.get_device_name(0)
    common.print_header(title, settings)

    results = []
    for k in sizes:
        results.append(run_k(k, args, cuda))
        print(f"   k={k} done, load {common.load_average()}", flush=True)

    base = results[0]["updates_per_s"]
    print()
    if cuda:
        print(
            table(
                [
                    "k",
                    "gpu/actor",
                    "actors",
                    "updates/s",
                    "x k=first",
                    "train-phase upd/s",
                    "steady round s",
                    "actor max alloc MiB",
                    "actor max reserved MiB",
                    "smi peak-before MiB",
                    "startup s",
                ],
                [
                    [
                        r["k"],
                        f"{r['client_gpus']:.3f}",
                        r["actors"],
                        r["updates_per_s"],
                        f"{r['updates_per_s'] / base:.2f}",
                        r["train_updates_per_s"],
                        r["steady_round_s"],
                        f"{mib(r['actor_alloc_max']):.0f}",
                        f"{mib(r['actor_reserved_max']):.0f}",
                        "-" if r["smi_peak"] is None else f"{r['smi_peak'] - (r['smi_before'] or 0)}",
                        r["startup"],
                    ]
                    for r in results
                ],
            )
        )
        for r in results:
            mine = {
                pid: m for pid, m in r["smi_per_pid"].items() if pid in r["actor_pids"] or pid == os.getpid()
            }
            if mine:
                print(f"k={r['k']}: nvidia-smi MiB per process (driver {os.getpid()}): {mine}")
            elif r["smi_per_pid"]:
                print(
                    f"k={r['k']}: nvidia-smi's process ids do not match this machine's (container?): "
                    f"{sorted(r['smi_per_pid'].values())} MiB"
                )
    else:
        print(
            table(
                [
                    "k",
                    "cpus/actor",
                    "actors",
                    "updates/s",
                    "x k=first",
                    "train-phase upd/s",
                    "steady round s",
                    "peak RSS MiB",
                    "startup s",
                ],
                [
                    [
                        r["k"],
                        f"{r['client_cpus']:.2f}",
                        r["actors"],
                        r["updates_per_s"],
                        f"{r['updates_per_s'] / base:.2f}",
                        r["train_updates_per_s"],
                        r["steady_round_s"],
                        f"{mib(r['rss_peak']):.0f}",
                        r["startup"],
                    ]
                    for r in results
                ],
            )
        )
    print("updates per actor: " + "; ".join(f"k={r['k']}: {r['actor_updates']}" for r in results))
    print(f"load average at end: {common.load_average()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
