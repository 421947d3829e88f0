"""One simulation on one of the engines (fedpfn.runtime.engines), from a validated config.

Everything that can be refused is checked before an engine starts and before the run folder
is touched: settings, data files, the partition, the server strategy, resources, the folder and
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
from typing import Any

from fedpfn.core.cache import client_indices, dataset_for
from fedpfn.core.config import PLACEMENT, TRACKERS, ConfigError, RunConfig
from fedpfn.core.data import DataError, find_data_problem
from fedpfn.core.files import LOG
from fedpfn.core.models import build_model
from fedpfn.runtime import env, lifecycle
from fedpfn.runtime.algorithms import parse_config, validated
from fedpfn.runtime.engines import ENGINES
from fedpfn.runtime.runfolder import RunFolder
from fedpfn.runtime.tracking import check_available
from partitions import PartitionError

env.flower_defaults()

log = logging.getLogger("fedpfn")
STOP_GRACE_SECONDS = 8.0  # after a signal, Ray gets this long to shut down


def check_runnable(cfg: RunConfig) -> None:
    """Raise ConfigError for anything that would fail after start-up: trackers, data, partition."""
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
            ray = sys.modules.get("ray")  # only an engine that started Ray has it to shut down
            if ray is not None:
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
    """Flower logs every sampling and aggregation step; our lines say enough."""
    logging.getLogger("flwr").setLevel(logging.CRITICAL)


def simulate(cfg: RunConfig, resume: bool = False, show_progress: bool = True) -> dict[str, Any]:
    """Run (or resume) one simulation on the config's engine and return its summary."""
    engine = ENGINES[cfg.engine]
    cfg = dataclasses.replace(cfg, out=str(cfg.run_dir.resolve()))  # workers find it from any folder
    check_runnable(cfg)
    cfg = engine.prepare(cfg)  # config.json records the placement the engine resolved
    run = lifecycle.plan(cfg, resume)
    with lifecycle.claimed(run, cfg.engine), lifecycle.tracking(run, engine.describe(cfg), show_progress) as tracker:
        with stop_on_signals(run.folder):
            quiet_flower()
            engine.run(run, tracker)
    if not run.folder.is_finished():
        raise RuntimeError(f"the simulation ended without finishing; see {run.folder.path}")
    return run.folder.read_summary()


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
    stored = parse_config(folder.read_config())
    requested = parse_config({**stored.to_dict(), **overrides})
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
    return validated(cfg)
