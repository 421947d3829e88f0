"""The cores this process may use and how a study shares them among its cells; how much of a GPU
a simulated client gets when the user leaves `client_gpus` unset ("auto").

The rule, applied before Ray starts and recorded in config.json as the resolved value:

    concurrent = min(floor(cpus / client_cpus), clients_per_round)   # clients training at once
    share      = min(1, gpus_visible / concurrent), rounded down to 4 decimals

so every client the CPUs can run at the same time has a slice of the GPU(s), no GPU sits idle
while clients wait, and `concurrent * share <= gpus_visible` holds, so Ray never leaves a client
without a slot (a share above 1 GPU would not speed up a single-GPU client). No visible GPU, or
`client_gpus` 0, means the CPU. Kept free of torch and Ray so it is tested as a plain function.
"""

from __future__ import annotations

import math
import os

RAY_RESOLUTION = 10_000  # Ray accounts fractional resources in units of 1e-4


def usable_cores() -> set[int]:
    """The cores this process may run on (its affinity, which `taskset` and a study's share of the
    machine set), not the machine's."""
    return set(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else set(range(os.cpu_count() or 1))


def core_shares(jobs: int, cores: set[int]) -> list[set[int]]:
    """`cores` split into `jobs` disjoint shares as even as they go (at most one a core): the one
    rule by which `fedpfn study run --jobs N` places its cells. A cell's engine then trains on the
    cores of its share (its processes mode: one worker a core), so N cells and their engines
    never ask for more cores than there are; the numbers do not depend on the share."""
    ordered = sorted(cores)
    jobs = max(1, min(jobs, len(ordered)))
    bounds = [round(i * len(ordered) / jobs) for i in range(jobs + 1)]
    return [set(ordered[bounds[i] : bounds[i + 1]]) for i in range(jobs)]


def concurrent_clients(cpus: int, client_cpus: float, clients_per_round: int) -> int:
    """How many clients train at the same time: as many as the CPUs hold, at most a round's."""
    return max(1, min(math.floor(cpus / client_cpus), clients_per_round))


def gpu_share(cpus: int, client_cpus: float, clients_per_round: int, gpus_visible: int) -> float:
    """The GPU fraction each client reserves under the rule above (0.0 without a GPU)."""
    if gpus_visible <= 0:
        return 0.0
    share = min(1.0, gpus_visible / concurrent_clients(cpus, client_cpus, clients_per_round))
    return math.floor(share * RAY_RESOLUTION) / RAY_RESOLUTION


def cpus_problem(client_cpus: float, cpus: int) -> str | None:
    """Why a client cannot have `client_cpus` of this machine's `cpus` (either engine), or None."""
    if client_cpus > cpus:
        return f"client_cpus: {client_cpus:g} exceeds this machine's {cpus} CPUs"
    return None


def client_wants_gpu(client_gpus: float | None) -> bool:
    """A client trains on a visible GPU unless told 0; None ("auto", as `flwr run` leaves it)
    means whatever the federation's `client-resources-num-gpus` made visible to it."""
    return client_gpus is None or client_gpus > 0
