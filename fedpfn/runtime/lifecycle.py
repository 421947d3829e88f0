"""A run's life on the server side, one path for run_sim.py (either engine) and `flwr run`:
decide start or resume, claim the folder, run the rounds with tracking.

Everything that can be refused is checked before the folder is touched (`plan`); the folder
is then held by this process alone while its settings are written and its rounds run
(`claimed`), and `serve` runs the ServerLoop with the terminal, run.log and trackers.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from flwr.serverapp import Grid

from fedpfn.core.cache import initial_model
from fedpfn.core.config import RunConfig
from fedpfn.core.files import CHECKPOINT
from fedpfn.runtime import provenance
from fedpfn.runtime.algorithms import build_strategy
from fedpfn.runtime.resume import resume_point
from fedpfn.runtime.runfolder import RunFolder, RunFolderError
from fedpfn.runtime.server import ServerLoop
from fedpfn.runtime.tracking import Tracking, tracked_run
from fedpfn.runtime.transport import TrainGrid


@dataclass(frozen=True)
class RunPlan:
    """A checked run: its settings, its folder, and the checkpoint it continues from (if any)."""

    cfg: RunConfig
    folder: RunFolder
    resume: bool
    checkpoint: dict[str, Any] | None


def plan(cfg: RunConfig, resume: bool) -> RunPlan:
    """Check the folder for a new run, or find the checkpoint a resumed one continues from."""
    folder = RunFolder(cfg.run_dir)
    if not resume:
        folder.check_new_run(cfg.output.overwrite)
        return RunPlan(cfg, folder, resume, None)
    checkpoint = resume_point(cfg, folder)
    if checkpoint is not None:
        check_strategy_state(cfg, folder, checkpoint["strategy"])
    return RunPlan(cfg, folder, resume, checkpoint)


def check_strategy_state(cfg: RunConfig, folder: RunFolder, state: dict[str, Any]) -> None:
    """The checkpoint's server state loads into the run's strategy, tried on a copy now: a forged
    one is refused before the folder is touched, not found by the server loop after the claim."""
    flower = logging.getLogger("flwr")
    level = flower.level
    flower.setLevel(logging.ERROR)  # its notes on building a strategy belong to the run, not to a check
    try:
        strategy = build_strategy(cfg, initial_model(cfg))
    finally:
        flower.setLevel(level)
    try:
        strategy.load_state(state)
    except Exception as err:  # noqa: BLE001  (a strategy's load_state, the user's too, may raise anything)
        raise RunFolderError(
            f"{folder.path / CHECKPOINT} is damaged (its strategy state: {type(err).__name__} "
            f"{str(err)[:80]}); the run cannot be resumed"
        ) from None


@contextmanager
def claimed(run: RunPlan, engine: str) -> Iterator[None]:
    """Hold the folder; a new run writes its config, a resumed one its provenance (and is
    unfinished again). `engine` is what trains the clients: batched, ray or deployment."""
    folder, cfg = run.folder, run.cfg
    first_round = 1 + (int(run.checkpoint["round"]) if run.checkpoint else 0)
    with folder.exclusive():
        if not run.resume:
            folder.start(cfg.to_dict(), overwrite=cfg.output.overwrite, provenance=provenance.collect(engine, first_round))
        else:  # `--rounds N` may continue a finished run: it is unfinished again
            folder.unfinish()
            previous = folder.read_provenance()
            folder.write_config(cfg.to_dict(), provenance.for_resume(previous, engine, first_round))
        yield


@contextmanager
def tracking(run: RunPlan, compute: str, show: bool = True) -> Iterator[Tracking]:
    """The terminal, run.log and the trackers of the run; `compute` is the header's compute line."""
    with tracked_run(run.cfg, run.folder, run.checkpoint, compute, show) as tracker:
        yield tracker


def serve(grid: Grid, run: RunPlan, tracker: Tracking | None, train_grid: TrainGrid | None = None) -> dict[str, Any]:
    """The rounds, from the run's checkpoint (or round 1) to its last: the summary. `train_grid`:
    what the rounds train through, when not `grid` itself (the batched engine's)."""
    return ServerLoop(grid, run.cfg, run.folder, run.checkpoint, train_grid).run(tracker)
