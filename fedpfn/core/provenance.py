"""Which code, libraries and machine made a result: commit, package versions, CPU, threads, GPUs.

Two machines can give different numbers for the same settings (a BLAS kernel, a thread count),
so every result file carries this beside its figures: a run's config.json (through
fedpfn.runtime.provenance, which adds what is about the run) and every analysis result (lmc.json,
soup.json, cold.json, a study's cells). `machines_sentence` says when a page's results came from
more than one machine. Every probe is best effort: a value that cannot be found is null.
"""

from __future__ import annotations

import os
import platform
import subprocess
from collections.abc import Iterable, Mapping
from importlib import metadata
from pathlib import Path
from typing import Any

PACKAGES = ("flwr", "torch", "torchvision", "ray", "numpy", "scipy")
CHECKOUT = Path(__file__).resolve().parents[2]  # the folder above the fedpfn package
GIT_SECONDS = 5.0
KEY = "provenance"  # the key a result file keeps it under
NOT_RECORDED = "machine not recorded"


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


def cpu_model() -> str | None:
    """The CPU's name: /proc/cpuinfo's 'model name' (Linux), else platform.processor()."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def cpu_id() -> str | None:
    """The CPU's kind, finer than its name (two 'AMD EPYC' may be different generations):
    /proc/cpuinfo's vendor, family, model and stepping, and the vector instructions torch's kernels
    use (its CPU capability), which decide how they round; None where /proc/cpuinfo is absent."""
    import torch

    keys = ("vendor_id", "cpu family", "model", "stepping")
    found: dict[str, str] = {}
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as fh:
            for line in fh:
                name, _, value = line.partition(":")
                if name.strip() in keys and name.strip() not in found:
                    found[name.strip()] = value.strip()
    except OSError:
        return None
    kind = " ".join(f"{key} {found.get(key)}" for key in keys)
    return f"{kind}, {torch.backends.cpu.get_cpu_capability()}"


def device() -> dict[str, Any]:
    """The compute: CPU model, kind and count, torch's thread count, the GPUs torch sees."""
    import torch

    gpus = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    return {
        "cpu": cpu_model(),
        "cpu_id": cpu_id(),  # two CPUs of one name may round differently: what tells them apart
        "cpus": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "gpus": gpus,
        "cuda": torch.version.cuda if gpus else None,
        "platform": platform.platform(),
    }


def collect() -> dict[str, Any]:
    """What a result file records of where it was made: code, Python, libraries, machine."""
    return {"git": git_state(), "python": platform.python_version(), "packages": package_versions(), "device": device()}


def machine_of(provenance: Mapping[str, Any] | None) -> str:
    """One line naming the machine and libraries behind a result; NOT_RECORDED for one written
    before results carried a provenance."""
    if not provenance or not isinstance(provenance.get("device"), Mapping):
        return NOT_RECORDED
    found = provenance["device"]
    packages = provenance.get("packages") or {}
    gpus = ", ".join(found.get("gpus") or []) or "no GPU"
    libraries = ", ".join(f"{name} {packages.get(name)}" for name in ("torch", "numpy", "scipy"))
    kind = f" [{found['cpu_id']}]" if found.get("cpu_id") else ""  # recorded since 2026-12-08
    return f"{found.get('cpu')}{kind} ({found.get('cpus')} CPUs, {found.get('torch_threads')} torch threads), {gpus}; {libraries}"


def machines_sentence(provenances: Iterable[Mapping[str, Any] | None]) -> str:
    """'' when every result came from one machine and set of libraries; else a sentence that says
    the page mixes them and names each (results without a provenance: NOT_RECORDED)."""
    seen = list(dict.fromkeys(machine_of(p) for p in provenances))
    if len(seen) <= 1 and NOT_RECORDED not in seen:
        return ""
    if seen == [NOT_RECORDED]:
        return f"The results on this page were written before results recorded their machine ({NOT_RECORDED})."
    named = "; ".join(f"({i}) {machine}" for i, machine in enumerate(seen, 1))
    return f"The results on this page come from {len(seen)} machines or library sets: {named}."
