"""The process environment fedpfn sets up for Flower and checks for Ray, in one place."""

from __future__ import annotations

import os
import socket
from pathlib import Path

from fedpfn.core.settings import ConfigError

# Flower's telemetry and its per-run dependency installation are off wherever fedpfn starts
# Flower, unless the user set these variables (export them to turn either back on).
FLOWER_DEFAULTS = {
    "FLWR_TELEMETRY_ENABLED": "0",
    "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1",
    "FLWR_DISABLE_UPDATE_CHECK": "1",
}
RAY_CONNECT_SECONDS = 10.0


def flower_defaults() -> None:
    for key, value in FLOWER_DEFAULTS.items():
        os.environ.setdefault(key, value)


def check_ray_address(address: str, timeout: float = RAY_CONNECT_SECONDS) -> None:
    """Refuse an address no Ray cluster answers at, within `timeout` seconds, before Ray starts."""
    if address == "auto":
        if not Path("/tmp/ray/ray_current_cluster").exists() and not os.environ.get("RAY_ADDRESS"):
            raise ConfigError("ray_address: 'auto' found no running Ray cluster on this machine; start one with `ray start --head`")
        return
    host, _, port = address.removeprefix("ray://").rpartition(":")
    if not host or not port.isdigit():
        raise ConfigError(f"ray_address: '{address}' is not HOST:PORT or 'auto'")
    try:
        socket.create_connection((host, int(port)), timeout=timeout).close()
    except OSError as err:
        raise ConfigError(
            f"ray_address: no Ray cluster answers at {address} within {timeout:g} s ({err.strerror or err})"
        ) from None
