"""Where a run's numbers came from: code version, packages, device, command, host, time.

Saved as `provenance` in `config.json` beside the settings (never part of them: the checkpoint
fingerprint and `RunConfig` ignore it), so a figure can be traced to the commit and machine
that made it. Every probe is best effort: a value that cannot be found is null, never an error.
"""

from __future__ import annotations

import os
import platform
import shlex
import socket
import subprocess
import sys
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import Any

PACKAGES = ("flwr", "torch", "torchvision", "ray", "numpy")
CHECKOUT = Path(__file__).resolve().parents[2]  # the folder above the fedpfn package
GIT_SECONDS = 5.0


def _git(*args: str) -> str | None:
    try:
        done = subprocess.run(
            ["git", "-C", str(CHECKOUT), *args], capture_output=True, text=True, timeout=GIT_SECONDS
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def git_state() -> dict[str, Any] | None:
    """Commit and dirty flag of the checkout fedpfn runs from; None for an installed copy.

    `dirty` counts changes to tracked files only: run folders and notes beside a checkout
    do not change the code that ran.
    """
    top = _git("rev-parse", "--show-toplevel")
    if top is None or Path(top).resolve() != CHECKOUT:
        return None  # fedpfn is not the top of this work tree (e.g. installed into a venv)
    commit = _git("rev-parse", "HEAD")
    status = _git("status", "--porcelain", "--untracked-files=no")
    return {"commit": commit, "dirty": None if status is None else bool(status)}


def package_versions() -> dict[str, str | None]:
    """Installed versions, read from package metadata (nothing is imported)."""
    versions: dict[str, str | None] = {}
    for name in PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def device() -> dict[str, Any]:
    """The server's compute: CPU count and the GPUs torch sees."""
    import torch

    gpus = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    return {
        "cpus": os.cpu_count(),
        "gpus": gpus,
        "cuda": torch.version.cuda if gpus else None,
        "platform": platform.platform(),
    }


def collect(engine: str, first_round: int, argv: list[str] | None = None) -> dict[str, Any]:
    """Everything above for this process, stamped with the time it started, what ran its
    clients (`engine`: batched, ray or deployment) and the first round it ran."""
    return {
        "started": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "engine": engine,
        "first_round": first_round,
        "command": shlex.join(sys.argv if argv is None else argv),
        "host": socket.gethostname(),
        "git": git_state(),
        "python": platform.python_version(),
        "packages": package_versions(),
        "device": device(),
    }


def for_resume(
    previous: dict[str, Any], engine: str, first_round: int, argv: list[str] | None = None
) -> dict[str, Any]:
    """The first process's provenance, with this one appended to `resumes`: a run may be
    continued on another engine, and each entry says which rounds it ran from."""
    if not previous:
        return collect(engine, first_round, argv)
    return {**previous, "resumes": [*previous.get("resumes", []), collect(engine, first_round, argv)]}
