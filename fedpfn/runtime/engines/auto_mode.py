"""`--engine-mode auto` on the CPU: the batched engine times its ways of running a round and
takes the faster, before the run starts, so that config.json records what computed the numbers
(a resume continues in it) and the header says what was chosen and the times that decided it.

On a GPU auto is vmap. On the CPU neither way wins everywhere: convolutions under vmap become
grouped convolutions, slow on the CPU, while a small model's clients gain from one stacked
program; and a shared machine's load moves the balance (benchmarks/README.md). So `loop` (one
client after another on all cores), `threads` (clients side by side, one torch thread each)
and `vmap` each train round 1's clients for a few steps, twice (the first is a warm-up), on a
copy of round 1's message; nothing of it is kept (no client state is written, no run folder
touched). `loop` chosen so records its threads as `client_cpus`, which is what that mode reads. A round with fewer than
`TIMED_FROM` clients takes the fixed rule: the probe would cost more than it could save.
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from flwr.app import ArrayRecord, RecordDict

from fedpfn.core.cache import initial_model
from fedpfn.core.config import RunConfig
from fedpfn.runtime.algorithms import build_strategy, client_rules
from fedpfn.runtime.engines.cohort import device_of, mode_of
from fedpfn.runtime.engines.grid import act_as_server
from fedpfn.runtime.engines.prepared import ClientJob
from fedpfn.runtime.engines.program import Cohort
from fedpfn.runtime.engines.sequential import train_loop, train_threads
from fedpfn.runtime.engines.stacked import train_chunks
from fedpfn.runtime.server import train_config, with_accepted_round
from strategies import sample_clients

TIMED_FROM = 4  # clients a round from which auto times the modes on the CPU
PROBE_STEPS = 3  # local steps each client takes in a timing


@dataclass(frozen=True)
class ModeChoice:
    mode: str
    why: str  # for the header: the rule, or the times that decided
    client_cpus: float | None = None  # `loop`'s threads, where the timing chose it


def choose_mode(cfg: RunConfig, timed: bool = True) -> ModeChoice:
    """How the batched engine in this process runs `cfg`'s rounds when its mode is `auto`
    (`timed` False: the fixed rule, for checks that must not train)."""
    device = device_of(cfg)
    if device.type == "cuda":
        return ModeChoice("vmap", "auto: vmap on the GPU")
    if cfg.clients_per_round < TIMED_FROM or not timed:
        mode = mode_of(cfg, device)
        rule = "convolutions under vmap are slow on the CPU" if mode == "threads" else "no convolutions"
        small = f"fewer than {TIMED_FROM} clients a round" if timed else "not timed here"
        return ModeChoice(mode, f"auto: {mode}, {rule} ({small})")
    seconds = time_modes(cfg)
    mode = min(seconds, key=seconds.__getitem__)
    times = ", ".join(f"{name} {value:.2f} s" for name, value in seconds.items())
    steps = f"{cfg.clients_per_round} clients x {PROBE_STEPS} steps"
    cores = float(os.cpu_count() or 1) if mode == "loop" else None
    return ModeChoice(mode, f"auto: {mode}, the fastest for round 1's {steps} ({times})", cores)


def time_modes(cfg: RunConfig) -> dict[str, float]:
    """Seconds each mode takes for round 1's clients' first steps (the second of two tries)."""
    cores = os.cpu_count() or 1
    ways: dict[str, Callable[[Cohort], object]] = {
        "loop": lambda cohort: train_loop(cohort, cores),
        "threads": lambda cohort: train_threads(cohort, cores),
        "vmap": lambda cohort: train_chunks(cohort, len(cohort.clients)),
    }
    with tempfile.TemporaryDirectory(prefix="fedpfn-probe-") as scratch:
        cohort = _probe_cohort(cfg, Path(scratch))
        seconds = {}
        for name, train in ways.items():
            for _ in range(2):
                started = time.perf_counter()
                train(cohort)
                seconds[name] = time.perf_counter() - started
    return seconds


class _Nodes:
    """The node ids a strategy samples from: round 1's partitions."""

    def __init__(self, node_ids: list[int]) -> None:
        self.node_ids = node_ids

    def get_node_ids(self) -> list[int]:
        return list(self.node_ids)


def _probe_cohort(cfg: RunConfig, scratch: Path) -> Cohort:
    """Round 1's clients on round 1's message, each cut to its first PROBE_STEPS batches; their
    state read from and kept in `scratch`, never the run folder."""
    act_as_server()
    model = initial_model(cfg)
    strategy = build_strategy(cfg, model)
    chosen = sample_clients(cfg.seed, 1, cfg.num_clients, cfg.clients_per_round)
    arrays = ArrayRecord(model.state_dict())
    message = next(iter(strategy.configure_train(1, arrays, train_config(cfg, 1), _Nodes(chosen))))
    content = with_accepted_round(message, 0).content
    jobs = [ClientJob(p, RecordDict(), 0, state_root=scratch) for p in chosen]
    cohort = Cohort(client_rules(cfg), cfg, content, device_of(cfg), jobs)
    for client in cohort.clients:
        client.batches = client.batches[:PROBE_STEPS]
    return cohort
