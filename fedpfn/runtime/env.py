"""The process environment fedpfn sets up for Flower and checks for Ray, in one place.

Flower 1.42 reads its switches from the process environment only (nothing in pyproject.toml
or $FLWR_HOME/config.toml): each of `flwr`, the SuperLink, SuperExec and the app processes
reads FLWR_TELEMETRY_ENABLED when it starts, the SuperLink reads
FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION, and the managed local SuperLink that `flwr run`
starts inherits the environment of that `flwr run`. So the project's defaults are set where
fedpfn starts Flower (run_sim.py, the scripts) and, for commands a user types, by the venv's
activate script (`python -m fedpfn.runtime.env --activate .venv/bin/activate`, run by `make`).

    python -m fedpfn.runtime.env                          # print the lines activate gets
"""

from __future__ import annotations

import os
import socket
import sys
from pathlib import Path

from fedpfn.core.settings import ConfigError

# Flower's telemetry and its per-run dependency installation are off wherever fedpfn starts
# Flower, unless the user set these variables (export them to turn either back on).
FLOWER_DEFAULTS = {
    "FLWR_TELEMETRY_ENABLED": "0",
    "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1",
    "FLWR_DISABLE_UPDATE_CHECK": "1",
}
INSTALL_SWITCH = "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION"
# `flwr run` with no SuperLink configured uses (or starts) the managed SuperLink on these ports,
# 39091 and 39093 unless set: on one machine a second user's runs would go to the first user's
# SuperLink and run as that user. activate gives each user ports of their own, from the uid.
LOCAL_PORTS = ("FLWR_LOCAL_SUPERLINK_HTTP_API_PORT", "FLWR_LOCAL_CONTROL_API_PORT")
LOCAL_PORT_BASE, LOCAL_PORT_USERS = 21000, 5000  # HTTP 21000 + 2 * (uid % 5000), Control the next one
BLOCK = ("# >>> fedpfn: Flower's switches (python -m fedpfn.runtime.env)", "# <<< fedpfn")
RAY_CONNECT_SECONDS = 10.0


def flower_defaults() -> list[str]:
    """Set the project's Flower switches the user has not set; the names this set."""
    unset = [key for key in FLOWER_DEFAULTS if key not in os.environ]
    for key in unset:
        os.environ[key] = FLOWER_DEFAULTS[key]
    return unset


def activate_lines() -> list[str]:
    """Shell lines for a venv's activate: the defaults above and per-user local SuperLink ports.

    `${VAR:-value}`: a value exported before activating wins.
    """
    port = f"$(({LOCAL_PORT_BASE} + 2 * ($(id -u) % {LOCAL_PORT_USERS})))"
    values = {**FLOWER_DEFAULTS, LOCAL_PORTS[0]: port, LOCAL_PORTS[1]: f"$(({LOCAL_PORTS[0]} + 1))"}
    return [BLOCK[0], *(f'export {key}="${{{key}:-{value}}}"' for key, value in values.items()), BLOCK[1]]


def write_activate(path: Path) -> None:
    """Put `activate_lines` at the end of the activate script at `path`, replacing an earlier copy."""
    lines = path.read_text().splitlines()
    if BLOCK[0] in lines and BLOCK[1] in lines:
        del lines[lines.index(BLOCK[0]) : lines.index(BLOCK[1]) + 1]
    path.write_text("\n".join([*lines, *activate_lines()]) + "\n")


def runtime_env_problem() -> str | None:
    """Why this process runs in an environment Flower installed for the run, or None.

    A SuperLink started without FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION=1 runs `uv sync`
    for every run and then runs the app there: other package versions than the project's venv
    (torch 2.15.0 against 2.14.1 was seen), a minute of installing per run. Exported as 0, it
    is the user's choice and passes.
    """
    from flwr.supercore.utils import get_flwr_home

    venv = os.environ.get("VIRTUAL_ENV")
    if not venv or os.environ.get(INSTALL_SWITCH) == "0":
        return None
    if not Path(venv).resolve().is_relative_to(get_flwr_home().resolve()):
        return None
    return (
        f"Flower installed this run's dependencies into {venv} and runs the app there, not in the "
        f"project's environment ({sys.prefix}): the SuperLink was started without {INSTALL_SWITCH}=1. "
        "Stop it and start it (or `flwr run`, for the managed one) from a shell that ran "
        f". .venv/bin/activate, or export {INSTALL_SWITCH}=0 to keep installing"
    )


def check_ray_address(address: str, timeout: float = RAY_CONNECT_SECONDS) -> None:
    """Refuse an address no Ray cluster answers at, within `timeout` seconds, before Ray starts."""
    if address == "auto":
        if not Path("/tmp/ray/ray_current_cluster").exists() and not os.environ.get("RAY_ADDRESS"):
            raise ConfigError(
                "ray_address: 'auto' found no running Ray cluster on this machine; start one with `ray start --head`"
            )
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


if __name__ == "__main__":  # python -m fedpfn.runtime.env [--activate PATH]
    if sys.argv[1:2] == ["--activate"] and len(sys.argv) == 3:
        write_activate(Path(sys.argv[2]))
    else:
        print("\n".join(activate_lines()))
