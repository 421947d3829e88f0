"""A round's cohort trained on one device: the batched engine's program where it runs (this
process, or each Ray actor of fedpfn.runtime.engines.actors), its device, mode and chunk size."""

from __future__ import annotations

import torch
from flwr.app import RecordDict

from fedpfn.core.config import RunConfig
from fedpfn.core.groups import Auto, BatchedMode, Loop, Processes, Threads, Vmap
from fedpfn.core.training import pick_device
from fedpfn.runtime.algorithms import client_rules
from fedpfn.runtime.engines.prepared import ClientJob
from fedpfn.runtime.engines.program import CohortProgram
from fedpfn.runtime.engines.result import CohortResult
from fedpfn.runtime.resources import usable_cores
from fedpfn.runtime.engines.stacked import fitting_chunk


def device_of(cfg: RunConfig) -> torch.device:
    """The GPU when one is visible and the clients may use it (`client_gpus` not 0), else the CPU."""
    return pick_device(want_gpu=cfg.placement.client_gpus is None or cfg.placement.client_gpus > 0)


def mode_of(cfg: RunConfig, device: torch.device, one_process: bool = False) -> BatchedMode:
    """The batched engine's mode (its variant), auto resolved by the machine alone, never by a timing: vmap on a GPU;
    on the CPU, processes where this process may use several cores and a round has several
    clients, else loop. Processes, threads and loop (one thread a client) give the numbers of
    the Ray engine bit for bit, whatever the load or the cores, so the same command on the same
    machine gives the same numbers; vmap (another order of sums) only when named on the CPU.
    `one_process`: a cohort that stays in this process (a Ray actor's share): threads.

    Why processes: a client's step on the CPU is partly Python, which the threads of one
    interpreter take in turns; on 2 cores processes trained the MLP's small clients 1.21-1.25
    times as fast as threads (docs/guide/engines.md)."""
    if not isinstance(cfg.engine, Auto):
        return type(cfg.engine)  # type: ignore[return-value]  (the batched engine's: Ray never asks)
    if device.type == "cuda":
        return Vmap
    if one_process:
        return Threads
    return Processes if len(usable_cores()) > 1 and cfg.federation.clients_per_round > 1 else Loop


def auto_reason(device: torch.device, mode: BatchedMode) -> str:
    """Why auto chose `mode` (mode_of's): for the header, beside the compute line."""
    if device.type == "cuda":
        return "auto: vmap on the GPU"
    if mode is Processes:
        return f"auto: processes on {len(usable_cores())} cores, the numbers of loop and of the Ray engine bit for bit"
    return "auto: loop on one core (or one client a round), the numbers of the Ray engine bit for bit"


class CohortRunner:
    """Trains a round's cohort on this process's device, with the chunk size that fits it."""

    def __init__(self, cfg: RunConfig, threads: int | None = None) -> None:
        self.cfg = cfg
        self.device = device_of(cfg)
        self.mode = mode_of(cfg, self.device, one_process=True)
        cores = threads or len(usable_cores())  # `threads`: clients side by side; `loop`: the ClientApp's
        self.threads = cores if self.mode is Threads else max(1, int(cfg.placement.client_cpus))
        chunk = cfg.engine.engine_chunk if isinstance(cfg.engine, Auto | Vmap) else 0
        self.chunk = chunk or None  # None: measured on the first round (vmap on a GPU)

    def __call__(self, content: RecordDict, jobs: list[ClientJob]) -> CohortResult:
        cohort = CohortProgram(client_rules(self.cfg), self.cfg, content, self.device, jobs)
        if self.chunk is None and self.mode is Vmap and self.device.type == "cuda":
            self.chunk = fitting_chunk(cohort, self.device)
        result = cohort.train(self.mode, threads=self.threads, chunk=self.chunk)
        self.chunk = cohort.chunk or self.chunk  # smaller after running out of memory
        return result

    def close(self) -> None:
        """Nothing to let go of in this process."""

