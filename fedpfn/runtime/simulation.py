"""One simulation on Flower's simulation engine (Ray), from a validated config.

Everything that can be refused is checked before Ray starts and before the run folder is
touched: settings, data files, the partition, the server strategy, resources, the folder and
(on resume) the checkpoint, metrics and client state. A run folder is marked finished
(`summary.json`) only by a run that reached its last round. SIGINT and SIGTERM stop a run
within seconds, leaving the folder resumable from its last checkpoint.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from types import FrameType
from typing import TYPE_CHECKING, Any

from fedpfn.runtime import env
from fedpfn.core.config import PLACEMENT, TRACKERS, ConfigError, RunConfig
from fedpfn.runtime.runfolder import LOG, RunFolder

if TYPE_CHECKING:
    from fedpfn.runtime.tracking import Tracking

env.flower_defaults()
os.environ.setdefault("RAY_DEDUP_LOGS", "0")
os.environ.setdefault("RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO", "0")

log = logging.getLogger("fedpfn")
STOP_GRACE_SECONDS = 8.0  # after a signal, Ray gets this long to shut down


def check_runnable(cfg: RunConfig) -> None:
    """Raise ConfigError for anything that would fail after start-up: data, partition, resources."""
    import torch

    from fedpfn.core.cache import client_indices, dataset_for
    from fedpfn.core.data import DataError, find_data_problem
    from fedpfn.core.models import build_model
    from fedpfn.runtime.tracking import check_available
    from partitions import PartitionError

    check_available(cfg)
    problem = find_data_problem(cfg.dataset, cfg.data_root, cfg.download)
    if problem:
        raise ConfigError(problem)
    try:
        data = dataset_for(cfg)
        build_model(cfg.model, data.input_shape, data.num_classes)  # refuses images too small
        client_indices(cfg)
    except (DataError, PartitionError, ValueError) as err:
        raise ConfigError(str(err)) from None
    if cfg.ray_address:
        env.check_ray_address(cfg.ray_address)
        return
    cpus = os.cpu_count() or 1
    if cfg.client_cpus > cpus:
        raise ConfigError(f"client_cpus: {cfg.client_cpus:g} exceeds this machine's {cpus} CPUs")
    if cfg.client_gpus and not torch.cuda.is_available():
        raise ConfigError(f"client_gpus: {cfg.client_gpus:g} asks for a GPU but none is visible; use --client-gpus 0")


def resolve_client_gpus(cfg: RunConfig) -> RunConfig:
    """`client_gpus` left unset ("auto") made a number by fedpfn.runtime.resources' rule; a set value is kept.

    A Ray cluster's GPUs (`ray_address`) are not known before Ray starts, so auto means 0 there.
    """
    if cfg.client_gpus is not None:
        return cfg
    import torch

    from fedpfn.runtime.resources import gpu_share

    gpus = 0 if cfg.ray_address else torch.cuda.device_count()
    share = gpu_share(os.cpu_count() or 1, cfg.client_cpus, cfg.clients_per_round, gpus)
    return dataclasses.replace(cfg, client_gpus=share)


def warn_unused_gpu(cfg: RunConfig) -> None:
    """One line when the clients leave a visible GPU to the server alone."""
    import torch

    gpus = torch.cuda.device_count()
    if gpus and not cfg.client_gpus:
        why = "set --client-gpus for the Ray cluster" if cfg.ray_address else "--client-gpus 0"
        print(
            f"warning: {gpus} GPU(s) visible, but the clients train on the CPU ({why}); "
            "only the server's evaluation uses the GPU",
            file=sys.stderr,
        )


def backend_config(cfg: RunConfig) -> dict[str, Any]:
    """Ray resources: each client reserves `client_cpus` CPUs and `client_gpus` of a GPU.

    On a running cluster (`ray_address`) Ray counts the cluster's resources itself.
    """
    import torch

    init_args: dict[str, Any] = {"logging_level": logging.ERROR, "log_to_driver": False}
    if cfg.ray_address:
        init_args["address"] = cfg.ray_address
    else:
        init_args.update(num_cpus=os.cpu_count() or 1, include_dashboard=False)
        if torch.cuda.is_available():
            init_args["num_gpus"] = torch.cuda.device_count()
    return {
        "client_resources": {"num_cpus": cfg.client_cpus, "num_gpus": resolve_client_gpus(cfg).client_gpus},
        "init_args": init_args,
    }


@contextmanager
def stop_on_signals(folder: RunFolder) -> Iterator[None]:
    """SIGINT/SIGTERM: one line, Ray shut down, exit 130/143, the folder left resumable.

    Checkpoints are written atomically at round ends, so stopping at any moment loses at
    most the rounds since the last one; a watchdog makes sure the process ends in seconds.
    """

    def stop(signum: int, frame: FrameType | None) -> None:
        code = 128 + signum
        line = folder.stop_message()
        print(f"\n{line}", file=sys.stderr)
        with suppress(OSError), open(folder.path / LOG, "a") as fh:
            fh.write(line + "\n")
        threading.Timer(STOP_GRACE_SECONDS, os._exit, args=(code,)).start()
        (folder.path / ".fedpfn.lock").unlink(missing_ok=True)
        try:
            import ray

            ray.shutdown()
        finally:
            os._exit(code)

    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def quiet_flower() -> None:
    """Flower logs every sampling and aggregation step and Ray its start-up; our lines say enough."""
    logging.getLogger("flwr").setLevel(logging.CRITICAL)
    logging.getLogger("ray").setLevel(logging.ERROR)


def simulate(cfg: RunConfig, resume: bool = False, show_progress: bool = True) -> dict[str, Any]:
    """Run (or resume) one simulation and return its summary."""
    from fedpfn.runtime import provenance
    from fedpfn.runtime.server import resume_point
    from fedpfn.runtime.tracking import tracked_run

    cfg = dataclasses.replace(cfg, out=str(cfg.run_dir.resolve()))  # Ray workers find it from any folder
    cfg = resolve_client_gpus(cfg)  # config.json records the share the clients got
    check_runnable(cfg)
    warn_unused_gpu(cfg)
    folder = RunFolder(cfg.run_dir)
    if not resume:
        folder.check_new_run(cfg.overwrite)
    checkpoint = resume_point(cfg, folder) if resume else None
    with folder.exclusive():
        if not resume:
            folder.start(cfg.to_dict(), overwrite=cfg.overwrite, provenance=provenance.collect())
        else:  # `--rounds N` may continue a finished run: it is unfinished again
            folder.unfinish()
            folder.write_config(cfg.to_dict(), provenance.for_resume(folder.read_provenance()))
        with tracked_run(cfg, folder, checkpoint, ray_resources(cfg), show_progress) as tracker:
            with stop_on_signals(folder):
                run_on_ray(cfg, folder, checkpoint, tracker)
    if not folder.is_finished():
        raise RuntimeError(f"the simulation ended without finishing; see {folder.path}")
    return folder.read_summary()


def ray_resources(cfg: RunConfig) -> str:
    """The header's compute line: where Ray runs and how many clients can train at once."""
    import torch

    gpus = torch.cuda.device_count()
    per_client = f"{cfg.client_cpus:g} CPU" + (f" + {cfg.client_gpus:g} GPU" if cfg.client_gpus else "")
    server = f"server evaluates on {'cuda' if gpus else 'cpu'}"
    if cfg.ray_address:
        return f"Ray cluster at {cfg.ray_address}, {per_client} per client; {server}"
    cpus = os.cpu_count() or 1
    at_once = int(cpus // cfg.client_cpus)
    if cfg.client_gpus:
        at_once = min(at_once, int(gpus // cfg.client_gpus))
    return (
        f"Ray on this machine (starting, usually 10-30 s): {cpus} CPUs, {gpus} GPUs; "
        f"{per_client} per client, "
        f"up to {min(at_once, cfg.clients_per_round)} clients at a time; {server}"
    )


def run_on_ray(
    cfg: RunConfig, folder: RunFolder, checkpoint: dict[str, Any] | None, tracker: Tracking
) -> None:
    from fedpfn.runtime.app import client_app, make_server_app
    from fedpfn.runtime.flower import run_simulation

    quiet_flower()
    run_simulation(
        server_app=make_server_app(cfg, folder, checkpoint, tracker),
        client_app=client_app,
        num_supernodes=cfg.num_clients,
        backend_config=backend_config(cfg),
    )


def resume_config(run_dir: str, overrides: dict[str, Any]) -> RunConfig:
    """The settings a run folder was started with; `overrides` may only extend `rounds`
    (and switch `--tensorboard` / `--wandb`, which log the numbers but never change them, or
    move it: `--ray-address`, `--client-cpus`, `--client-gpus`).

    Any other flag that differs from the run's value is refused: a resumed run keeps its
    settings, so its numbers stay those of one uninterrupted run.
    """
    folder = RunFolder(run_dir)
    if not folder.holds_run():
        raise ConfigError(f"resume: '{run_dir}' holds no run (no config.json)")
    stored = RunConfig.from_dict(folder.read_config())
    requested = RunConfig.from_dict({**stored.to_dict(), **overrides})
    conflicts = requested.differences(stored, ignore=("out", "rounds", "overwrite", *PLACEMENT, *TRACKERS))
    if conflicts:
        raise ConfigError(
            f"resume: the run in '{run_dir}' was made with other settings ({'; '.join(conflicts)}); "
            "a resumed run keeps its settings (only --rounds may extend it)"
        )
    if requested.rounds < stored.rounds:
        raise ConfigError(f"resume: --rounds {requested.rounds} is fewer than the run's {stored.rounds}")
    if folder.is_finished():
        if requested.rounds == stored.rounds:
            raise ConfigError(
                f"resume: '{run_dir}' is finished ({stored.rounds} rounds); pass --rounds N to continue it to N rounds"
            )
        folder.check_usable()
    switched = {name: getattr(requested, name) for name in (*PLACEMENT, *TRACKERS)}  # may change on resume
    cfg = dataclasses.replace(
        stored, rounds=requested.rounds, out=str(folder.path), overwrite=False, **switched
    )
    return cfg.validated()
