"""How much of a GPU a simulated client gets when the user leaves `client_gpus` unset ("auto").

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

RAY_RESOLUTION = 10_000  # Ray accounts fractional resources in units of 1e-4


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
