"""The Ray engine: Flower's simulation engine, one ClientApp call per client on Ray's workers.

Each client reserves `client_cpus` CPUs and `client_gpus` of a GPU, so Ray runs as many at
once as the machine (or the cluster at `ray_address`) holds. This engine runs every part
exactly as a deployment would (a message per client, Ray's process isolation), joins a Ray
cluster, and runs any part without a batched form; the batched engine is faster on one node.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from typing import Any

import torch
from flwr.clientapp import ClientApp

from fedpfn.core.config import RunConfig
from fedpfn.core.settings import ConfigError
from fedpfn.runtime.engines.placement import check_placement, client_fits
from fedpfn.runtime.engines.ray_start import init_ray
from fedpfn.runtime.flower import run_simulation
from fedpfn.runtime.lifecycle import RunPlan
from fedpfn.runtime.resources import gpu_share
from fedpfn.runtime.server_app import make_server_app
from fedpfn.runtime.tracking import Tracking

os.environ.setdefault("RAY_DEDUP_LOGS", "0")
os.environ.setdefault("RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO", "0")


def prepare(cfg: RunConfig) -> RunConfig:
    """The placement as config.json records it (the GPU share resolved), checked before Ray starts."""
    cfg = resolve_client_gpus(cfg)
    check_ray_precision(cfg)
    joined = cfg.placement.ray_address
    check_placement(cfg, True, client_fits if joined else None)  # joined: Flower's engine runs on it
    if not joined:
        warn_unused_gpu(cfg)
    return cfg


RAY_RESOURCE_UNIT = 1e-4  # Ray counts resources in steps of 0.0001: a smaller share is 0 to it


def settle(run: RunPlan) -> tuple[RunPlan, str]:
    """Nothing left to resolve once the folder is checked: prepare resolved the placement."""
    return run, ""


def check_ray_precision(cfg: RunConfig) -> None:
    """A share Ray would refuse once started (its workers then hang): refused here, in one line."""
    for name in ("client_cpus", "client_gpus"):
        value = getattr(cfg.placement, name)
        if value and int(value / RAY_RESOURCE_UNIT) == 0:
            raise ConfigError(
                f"{name}: {value:g} is below Ray's smallest share of a resource ({RAY_RESOURCE_UNIT:g}); "
                f"give 0 or at least {RAY_RESOURCE_UNIT:g}"
            )


def resolve_client_gpus(cfg: RunConfig) -> RunConfig:
    """`client_gpus` left unset ("auto") made a number by fedpfn.runtime.resources' rule; a set value is kept.

    A Ray cluster's GPUs (`ray_address`) are not known before Ray starts, so auto means 0 there.
    """
    if cfg.placement.client_gpus is not None:
        return cfg
    gpus = 0 if cfg.placement.ray_address else torch.cuda.device_count()
    share = gpu_share(os.cpu_count() or 1, cfg.placement.client_cpus, cfg.federation.clients_per_round, gpus)
    return dataclasses.replace(cfg, placement=dataclasses.replace(cfg.placement, client_gpus=share))


def warn_unused_gpu(cfg: RunConfig) -> None:
    """One line when the clients leave a visible GPU to the server alone."""
    gpus = torch.cuda.device_count()
    if gpus and not cfg.placement.client_gpus:
        why = "set --client-gpus for the Ray cluster" if cfg.placement.ray_address else "--client-gpus 0"
        print(
            f"warning: {gpus} GPU(s) visible, but the clients train on the CPU ({why}); "
            "only the server's evaluation uses the GPU",
            file=sys.stderr,
        )


def backend_config(cfg: RunConfig) -> dict[str, Any]:
    """Ray resources: each client reserves `client_cpus` CPUs and `client_gpus` of a GPU.

    On a running cluster (`ray_address`) Ray counts the cluster's resources itself. Without
    one, Ray starts here ("local"): a bare `ray.init` would join a cluster that `ray start
    --head` (or a test's cluster) left on this machine, and fail there on `num_cpus`.
    """
    placed = cfg.placement
    init_args: dict[str, Any] = {}  # started by fedpfn.runtime.engines.ray_start, quiet
    if placed.ray_address:
        init_args["address"] = placed.ray_address
    else:
        init_args.update(address="local", num_cpus=os.cpu_count() or 1, include_dashboard=False)
        if torch.cuda.is_available():
            init_args["num_gpus"] = torch.cuda.device_count()
    return {
        "client_resources": {"num_cpus": placed.client_cpus, "num_gpus": resolve_client_gpus(cfg).placement.client_gpus},
        "init_args": init_args,
    }


def describe(cfg: RunConfig) -> str:
    """The header's compute line: where Ray runs and how many clients can train at once."""
    placed = cfg.placement
    gpus = torch.cuda.device_count()
    per_client = f"{placed.client_cpus:g} CPU" + (f" + {placed.client_gpus:g} GPU" if placed.client_gpus else "")
    server = f"server evaluates on {'cuda' if gpus else 'cpu'}"
    if placed.ray_address:
        return f"Ray cluster at {placed.ray_address}, {per_client} per client; {server}"
    cpus = os.cpu_count() or 1
    at_once = int(cpus // placed.client_cpus)
    if placed.client_gpus:
        at_once = min(at_once, int(gpus // placed.client_gpus))
    return (
        f"Ray on this machine (starting, usually 10-30 s): {cpus} CPUs, {gpus} GPUs; "
        f"{per_client} per client, "
        f"up to {min(at_once, cfg.federation.clients_per_round)} clients at a time; {server}"
    )


def run(run: RunPlan, tracker: Tracking, app: ClientApp) -> None:
    """The rounds on Flower's simulation engine: one call of `app` per client on Ray's workers."""
    init_ray(**backend_config(run.cfg)["init_args"])  # Flower's engine finds Ray started (or joined in prepare)
    run_simulation(
        server_app=make_server_app(run, tracker),
        client_app=app,
        num_supernodes=run.cfg.federation.num_clients,
        backend_config=backend_config(run.cfg),
    )


