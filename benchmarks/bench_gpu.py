"""Clients sharing one GPU: updates per second for k = 1, 2, 4, 8 against a plain GPU loop.

Client updates per second with k simulated clients on one GPU, against a plain
single-process GPU loop doing the same work, as ratios.

    .venv/bin/python benchmarks/bench_gpu.py --quick     # about 5 minutes of GPU time
    .venv/bin/python benchmarks/bench_gpu.py             # the full setting: 6 rounds, 2 local epochs
    .venv/bin/python benchmarks/bench_gpu.py --quick --cpu --sizes 1,2 --clients 8 --per-round 4 --model mlp

Without a visible CUDA device it prints one line and exits 2, unless `--cpu` asks for the
rehearsal: the same code on the CPU (`client_gpus` 0, `client_cpus` = cores / k, the
plain loop with torch's default threads), to check the script where there is no GPU.

For each k the real simulator runs (FedAvg, Fashion-MNIST iid, CNN) with `client_gpus =
1/k` and `client_cpus` (default 1) low enough that the CPUs never limit the number of
actors, so Ray packs k actors on the one GPU; each actor keeps the dataset on the GPU
(`fedpfn.core.cache.dataset_on`) and the server evaluates there. The baseline is
`plain.plain_fedavg` on the same GPU in this process: the same clients, batches, optimizer,
average and evaluation, one client after the other.

Reported per k, over the steady rounds (round 1 left out: actors start, CUDA contexts,
data copied to the GPU): client updates per second for the whole round and for the train
phase alone (without the server's evaluation), each with its ratio to the plain loop;
inside each actor `torch.cuda.max_memory_allocated()` and `max_memory_reserved()` (the
traced ClientApp reads them after each update); nvidia-smi's used memory at its peak
minus before the run (every CUDA context included, about 0.5 GiB per process); the
peak summed RSS of all processes.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any

import torch
from memory import BackgroundSampler, TreeMemory
from plain import plain_fedavg
from report import load_average, median, mib, print_header, ratio, table
from simulation import SimTiming, bench_config, steady, timed_simulation

from fedpfn.core.config import RunConfig

NO_CUDA_EXIT = 2  # as argparse's usage errors: nothing was measured
NO_CUDA = (
    "bench_gpu: no CUDA device is visible (torch.cuda.is_available() is False), so there is "
    "nothing to measure; run it on a machine with a GPU, or pass --cpu for a rehearsal on the CPU"
)
PRESETS = {  # the sizes every run measures, and how much work each measurement does
    "full": {"sizes": "1,2,4,8", "clients": 32, "per_round": 16, "rounds": 6, "epochs": 2, "model": "cnn"},
    "quick": {"sizes": "1,2,4,8", "clients": 32, "per_round": 16, "rounds": 3, "epochs": 1, "model": "cnn"},
}


# --- arguments and the CPU-side arithmetic (tested without a GPU) ---------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The settings: a preset (`--quick` or the full one) with any option given overriding it."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="the short setting: about 5 minutes of GPU time")
    ap.add_argument("--sizes", help="clients sharing the GPU, comma list (client_gpus = 1/k)")
    ap.add_argument("--clients", type=int, help="clients in the federation")
    ap.add_argument("--per-round", type=int, help="clients trained per round")
    ap.add_argument("--rounds", type=int, help="rounds per run; round 1 is not counted")
    ap.add_argument("--epochs", type=int, help="local epochs")
    ap.add_argument("--model", help="model (default cnn)")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--client-cpus", type=float, default=1.0, help="CPUs per actor on the GPU")
    ap.add_argument("--gpu", type=int, default=0, help="nvidia-smi index of the GPU to watch")
    ap.add_argument("--cpu", action="store_true", help="rehearsal without a GPU: k actors share the cores")
    args = ap.parse_args(argv)
    for key, value in PRESETS["quick" if args.quick else "full"].items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    try:
        args.sizes = [int(k) for k in str(args.sizes).split(",")]
    except ValueError:
        ap.error(f"--sizes: '{args.sizes}' is not a comma list of integers")
    if min(args.sizes) < 1:
        ap.error("--sizes: every k must be at least 1")
    if args.rounds < 2:
        ap.error("--rounds must be at least 2 (round 1 is start-up)")
    if not 1 <= args.per_round <= args.clients:
        ap.error(f"--per-round must be in 1..--clients ({args.clients})")
    return args


def resources(k: int, cuda: bool, cpus: int, client_cpus: float) -> tuple[float, float]:
    """(client_cpus, client_gpus) for k clients at once: 1/k of the GPU, or of the cores."""
    return (client_cpus, 1.0 / k) if cuda else (cpus / k, 0.0)


def too_many_cpus(sizes: list[int], client_cpus: float, cpus: int) -> str | None:
    """Why the CPUs would limit the actors on the GPU path (None: they do not)."""
    if max(sizes) * client_cpus > cpus:
        return f"{max(sizes)} actors x {client_cpus:g} CPUs > {cpus} CPUs: lower --client-cpus"
    return None


def rates(per_round: int, rounds: list[tuple[float, float]]) -> tuple[float, float]:
    """Client updates per second from (round seconds, train-phase seconds) of steady rounds."""
    updates = per_round * len(rounds)
    whole, train = sum(r[0] for r in rounds), sum(r[1] for r in rounds)
    return (updates / whole if whole else float("nan"), updates / train if train else float("nan"))


def parse_used(text: str, gpu: int) -> int | None:
    """MiB used on GPU `gpu`, from nvidia-smi's `--query-gpu=index,memory.used` (csv, no header, units)."""
    for line in text.splitlines():
        fields = [f.strip() for f in line.split(",")]
        if len(fields) == 2 and fields[0] == str(gpu) and fields[1].isdigit():
            return int(fields[1])
    return None


def parse_apps(text: str) -> dict[int, int]:
    """pid -> MiB, from nvidia-smi's `--query-compute-apps=pid,used_memory` (csv, no header, units)."""
    apps = {}
    for line in text.splitlines():
        fields = [f.strip() for f in line.split(",")]
        if len(fields) == 2 and fields[0].isdigit() and fields[1].isdigit():
            apps[int(fields[0])] = int(fields[1])
    return apps


# --- measuring -------------------------------------------------------------------------------


class NvidiaSmi(BackgroundSampler):
    """nvidia-smi's used memory of one GPU (MiB), overall and per process, sampled in a thread."""

    def __init__(self, gpu: int, interval: float = 0.5) -> None:
        self.gpu, self.interval = gpu, interval
        self.total: list[int] = []
        self.per_pid: dict[int, int] = {}
        self.available = shutil.which("nvidia-smi") is not None

    def query(self, *args: str) -> str:
        if not self.available:
            return ""
        try:
            cmd = ["nvidia-smi", *args, "--format=csv,noheader,nounits"]
            return subprocess.run(cmd, capture_output=True, text=True, timeout=10, check=False).stdout
        except (OSError, subprocess.SubprocessError):
            return ""

    def used(self) -> int | None:
        return parse_used(self.query("--query-gpu=index,memory.used"), self.gpu)

    def sample(self) -> None:
        if (used := self.used()) is not None:
            self.total.append(used)
        for pid, used_mib in parse_apps(self.query("--query-compute-apps=pid,used_memory")).items():
            self.per_pid[pid] = max(self.per_pid.get(pid, 0), used_mib)


@dataclass
class Plain:
    """The baseline: one process, one client after the other, on the same device."""

    updates_per_s: float
    train_updates_per_s: float
    steady_round_s: float


@dataclass
class Shared:
    """k simulated clients sharing the device."""

    k: int
    client_cpus: float
    client_gpus: float
    sim: SimTiming
    updates_per_s: float
    train_updates_per_s: float
    rss_peak: int
    smi_before: int | None
    smi_peak: int | None
    smi_per_pid: dict[int, int]

    def actors(self) -> dict[int, dict[str, int]]:
        """Per actor process: updates it ran and its CUDA allocator peaks."""
        out: dict[int, dict[str, int]] = {}
        for t in self.sim.traces:
            if "round" in t:
                a = out.setdefault(t["pid"], {"updates": 0, "allocated": 0, "reserved": 0})
                a["updates"] += 1
                a["allocated"] = max(a["allocated"], t.get("cuda_max_allocated", 0))
                a["reserved"] = max(a["reserved"], t.get("cuda_max_reserved", 0))
        return out


def config_for(args: argparse.Namespace, client_cpus: float, client_gpus: float) -> RunConfig:
    return bench_config(
        algorithm="fedavg", model=args.model, num_clients=args.clients, clients_per_round=args.per_round,
        rounds=args.rounds, partition="iid", local_epochs=args.epochs, batch_size=args.batch,
        client_cpus=client_cpus, client_gpus=client_gpus,
    )  # fmt: skip


def run_plain(args: argparse.Namespace, device: torch.device) -> Plain:
    cfg = config_for(args, 1.0, 0.0)
    rounds = [r for r in plain_fedavg(cfg, device) if r.round > 1]
    whole, train = rates(cfg.federation.clients_per_round, [(r.seconds, r.seconds - r.evaluate) for r in rounds])
    return Plain(whole, train, median(r.seconds for r in rounds))


def run_shared(args: argparse.Namespace, k: int, cuda: bool) -> Shared:
    client_cpus, client_gpus = resources(k, cuda, os.cpu_count() or 1, args.client_cpus)
    cfg = config_for(args, client_cpus, client_gpus)
    smi = NvidiaSmi(args.gpu) if cuda else None
    before = smi.used() if smi else None
    with TreeMemory(interval=0.5) as mem, smi if smi else nullcontext():
        sim = timed_simulation(cfg, trace=True)
    whole, train = rates(cfg.federation.clients_per_round, [(r.seconds, r.train) for r in steady(sim)])
    peak = mem.peak()
    return Shared(
        k, client_cpus, client_gpus, sim, whole, train, peak.rss if peak else 0, before,
        max(smi.total) if smi and smi.total else None, dict(smi.per_pid) if smi else {},
    )  # fmt: skip


# --- printing --------------------------------------------------------------------------------


def print_results(plain: Plain, shared: list[Shared], device: str) -> None:
    """One row per k, each rate beside its ratio to the plain loop on the same device."""
    print(
        f"\nplain single-process loop on the {device}: {plain.updates_per_s:.2f} updates/s "
        f"(train phase {plain.train_updates_per_s:.2f}), steady round {plain.steady_round_s:.3f} s"
    )
    rows = []
    for s in shared:
        actors = s.actors().values()
        smi = "-" if s.smi_peak is None else str(s.smi_peak - (s.smi_before or 0))
        rows.append([
            s.k, f"{s.client_gpus:.3f}" if s.client_gpus else f"{s.client_cpus:.2f} cpu", len(actors),
            s.updates_per_s, ratio(s.updates_per_s, plain.updates_per_s, 2),
            s.train_updates_per_s, ratio(s.train_updates_per_s, plain.train_updates_per_s, 2),
            median(r.seconds for r in steady(s.sim)),
            f"{mib(max((a['allocated'] for a in actors), default=0)):.0f}",
            f"{mib(max((a['reserved'] for a in actors), default=0)):.0f}",
            smi, f"{mib(s.rss_peak):.0f}", s.sim.phases["->round 1"],
        ])  # fmt: skip
    headers = ["k", "share/actor", "actors", "updates/s", "/plain", "train-phase upd/s", "/plain",
               "steady round s", "actor alloc MiB", "actor reserved MiB", "smi peak-before MiB",
               "peak RSS MiB", "start s"]  # fmt: skip
    print(table(headers, rows))
    per_actor = (f"k={s.k}: {sorted(a['updates'] for a in s.actors().values())}" for s in shared)
    print("updates per actor: " + "; ".join(per_actor))


def print_smi_processes(shared: list[Shared]) -> None:
    """nvidia-smi per process, where its process ids are this machine's (not in every container)."""
    for s in shared:
        mine = {pid: m for pid, m in s.smi_per_pid.items() if pid in s.actors() or pid == os.getpid()}
        if mine:
            print(f"k={s.k}: nvidia-smi MiB per process (driver {os.getpid()}): {mine}")
        elif s.smi_per_pid:
            seen = sorted(s.smi_per_pid.values())
            print(f"k={s.k}: nvidia-smi's process ids are not this machine's (a container?): {seen} MiB")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    cuda = torch.cuda.is_available() and not args.cpu
    if not cuda and not args.cpu:
        print(NO_CUDA, file=sys.stderr)
        return NO_CUDA_EXIT
    cpus = os.cpu_count() or 1
    if cuda and (problem := too_many_cpus(args.sizes, args.client_cpus, cpus)):
        print(f"bench_gpu: {problem}", file=sys.stderr)
        return NO_CUDA_EXIT
    device = torch.device("cuda" if cuda else "cpu")
    shown = ("sizes", "clients", "per_round", "rounds", "epochs", "model", "batch")
    settings: dict[str, Any] = {k: getattr(args, k) for k in shown}
    title = "clients sharing one GPU" if cuda else "--cpu: clients sharing the CPU cores (rehearsal)"
    print_header(f"bench_gpu: {title}", settings)
    plain = run_plain(args, device)
    print(f"   plain loop done, load {load_average()}", flush=True)
    shared = []
    for k in args.sizes:
        shared.append(run_shared(args, k, cuda))
        print(f"   k={k} done ({shared[-1].sim.total:.1f} s), load {load_average()}", flush=True)
    print_results(plain, shared, "GPU" if cuda else "CPU")
    if cuda:
        print_smi_processes(shared)
    print(f"load average at end: {load_average()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
