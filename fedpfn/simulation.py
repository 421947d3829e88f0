"""One simulation on Flower's simulation engine (Ray), from a validated config.

Everything that can be refused is checked here before Ray starts: settings, data files,
the partition. A run folder is claimed only after those checks, and is marked finished
(`summary.json`) only by a run that reached its last round.
"""

from __future__ import annotations

import logging
import os
from typing import Any

import torch

from fedpfn.config import ConfigError, RunConfig
from fedpfn.data import DataError, find_data_problem
from fedpfn.results import RunFolder
from fedpfn.workspace import client_indices, dataset_for
from partitions import PartitionError

os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")
os.environ.setdefault("FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION", "1")
os.environ.setdefault("FLWR_DISABLE_UPDATE_CHECK", "1")
os.environ.setdefault("RAY_DEDUP_LOGS", "0")
os.environ.setdefault("RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO", "0")


def check_runnable(cfg: RunConfig) -> None:
    """Raise ConfigError for anything that would fail after start-up: settings, data, partition."""
    cfg.validated()
    problem = find_data_problem(cfg.dataset, cfg.data_root, cfg.download)
    if problem:
        raise ConfigError(problem)
    try:
        dataset_for(cfg)
        client_indices(cfg)
    except (DataError, PartitionError) as err:
        raise ConfigError(str(err)) from None
    if cfg.client_gpus > 0 and not torch.cuda.is_available() and not cfg.ray_address:
        raise ConfigError(
            f"client_gpus: {cfg.client_gpus} asks for a GPU but none is visible; use --client-gpus 0"
        )


def backend_config(cfg: RunConfig) -> dict[str, Any]:
    """Ray resources: each client reserves `client_cpus` CPUs and `client_gpus` of a GPU.

    On a running cluster (`ray_address`) Ray counts the cluster's resources itself.
    """
    init_args: dict[str, Any] = {"logging_level": logging.ERROR, "log_to_driver": False}
    if cfg.ray_address:
        init_args["address"] = cfg.ray_address
    else:
        init_args.update(num_cpus=os.cpu_count() or 1, include_dashboard=False)
        if torch.cuda.is_available():
            init_args["num_gpus"] = torch.cuda.device_count()
    return {
        "client_resources": {"num_cpus": cfg.client_cpus, "num_gpus": cfg.client_gpus},
        "init_args": init_args,
    }


_EXPECTED_WARNINGS = (
    "The `run_simulation` function is deprecated",  # the Python API is what run_sim.py needs
    "fraction_evaluate is set to 0.0",  # evaluation runs on the server, by design
)


def _unexpected(record: logging.LogRecord) -> bool:
    return not any(text in record.getMessage() for text in _EXPECTED_WARNINGS)


def quiet_flower() -> None:
    """Flower logs every sampling and aggregation step; our progress line says enough."""
    logger = logging.getLogger("flwr")
    logger.setLevel(logging.WARNING)
    if _unexpected not in logger.filters:
        logger.addFilter(_unexpected)


def prepare_folder(cfg: RunConfig, resume: bool) -> RunFolder:
    folder = RunFolder(cfg.run_dir)
    if resume:
        return folder
    folder.start(cfg, overwrite=cfg.overwrite)
    return folder


def simulate(cfg: RunConfig, resume: bool = False, show_progress: bool = True) -> dict[str, Any]:
    """Run (or resume) one simulation and return its summary."""
    from flwr.simulation import run_simulation

    from fedpfn.app import client_app, make_server_app

    check_runnable(cfg)
    cfg.out = str(cfg.run_dir.resolve())  # Ray workers and resumes find it from any folder
    with RunFolder(cfg.run_dir).exclusive():
        folder = prepare_folder(cfg, resume)
        quiet_flower()
        run_simulation(
            server_app=make_server_app(cfg, folder, show_progress),
            client_app=client_app,
            num_supernodes=cfg.num_clients,
            backend_config=backend_config(cfg),
        )
    if not folder.is_finished():
        raise RuntimeError(f"the simulation ended without finishing; see {folder.path}")
    return folder.read_summary()


def resume_config(run_dir: str) -> RunConfig:
    """The config a run folder was started with, if it can be resumed."""
    folder = RunFolder(run_dir)
    if not folder.holds_run():
        raise ConfigError(f"resume: '{run_dir}' holds no run (no config.json)")
    if folder.is_finished():
        raise ConfigError(f"resume: '{run_dir}' is finished (summary.json exists); nothing to resume")
    cfg = folder.load_config()
    cfg.out = str(folder.path)
    return cfg
