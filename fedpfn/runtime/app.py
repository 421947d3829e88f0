"""The Flower app as `flwr run .` loads it (pyproject's `[tool.flwr.app.components]`): the
ClientApp (client_app.py) and the ServerApp (server_app.py), for simulation and deployment alike."""

from __future__ import annotations

from fedpfn.runtime.client_app import client_app
from fedpfn.runtime.server_app import server_app

__all__ = ["client_app", "server_app"]
