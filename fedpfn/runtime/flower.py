"""Flower's Python simulation entry point, kept in one place.

Flower 1.42 marks `flwr.simulation.run_simulation` deprecated in favour of `flwr run`.
run_sim.py still uses it because the supported path was slower here (README, "Running with
`flwr run`"): configs/quickstart.toml (4 clients, 2 rounds, MLP), three alternating runs each on
2 cores at load average 11-20, launch to the first round's line / to exit:
`run_sim.py` 57, 63, 70 s / 69, 73, 83 s; `flwr run . --stream` on an already running
SuperLink 81, 83, 75 s / 89, 94, 85 s (medians 63 / 73 s against 81 / 89 s). This path also
keeps what `flwr run` cannot give run_sim.py: one process that checks everything (data,
partition, strategy, folder) before Ray starts and exits 2 with one line per problem,
SIGINT/SIGTERM that leave a resumable folder, and no SuperLink to start, find and stop.
tests/integration/test_flower_api.py fails the day Flower removes the call or rewords its warning.

Flower announces the deprecation on its `flwr` logger (not with `warnings`), so the notice
is dropped there, and only that record (fedpfn.core.flower_notes).
"""

from __future__ import annotations

from typing import Any

from flwr.clientapp import ClientApp
from flwr.serverapp import ServerApp

from fedpfn.core.flower_notes import flower_note_dropped

DEPRECATION = "The `run_simulation` function is deprecated"


def run_simulation(
    server_app: ServerApp, client_app: ClientApp, num_supernodes: int, backend_config: dict[str, Any]
) -> None:
    from flwr.simulation import run_simulation as flower_run_simulation

    with flower_note_dropped(DEPRECATION):
        flower_run_simulation(
            server_app=server_app,
            client_app=client_app,
            num_supernodes=num_supernodes,
            backend_config=backend_config,
        )
