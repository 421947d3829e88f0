"""Flower's Python simulation entry point, kept in one place.

Flower 1.42 marks `flwr.simulation.run_simulation` deprecated in favour of `flwr run`.
run_sim.py still uses it: it starts a run in-process with a ServerApp built around an
already validated config (checks before Ray, signals, a typed config rather than a string
run config). tests/test_flower_api.py fails the day Flower removes the call.
"""

from __future__ import annotations

import warnings
from typing import Any

from flwr.clientapp import ClientApp
from flwr.serverapp import ServerApp

DEPRECATION = "The `run_simulation` function is deprecated"


def run_simulation(
    server_app: ServerApp, client_app: ClientApp, num_supernodes: int, backend_config: dict[str, Any]
) -> None:
    from flwr.simulation import run_simulation as flower_run_simulation

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=DEPRECATION)
        flower_run_simulation(
            server_app=server_app,
            client_app=client_app,
            num_supernodes=num_supernodes,
            backend_config=backend_config,
        )
