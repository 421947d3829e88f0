"""The batched engine: a round's clients trained as one program in this process.

The unchanged ServerApp, ServerLoop and strategies run over `BatchedGrid` (grid.py), an
in-process implementation of Flower's `Grid`: a round's clients are trained as one cohort
(program.py) on one device, the GPU when one is visible, else the CPU. No Ray is started
(start-up is the process, the data and the model) unless the round is spread over Ray actors: several GPUs, `--engine-workers`, or a cluster
at `--ray-address` (actors.py; where they go and what is refused: placement.py).

How a cohort runs (`--engine-mode`): `vmap` stacks the clients and takes each step for all
of them at once (auto's choice on a GPU); `processes` deals them to worker processes, one CPU
thread each (auto's choice on a CPU of several cores: the numbers of `loop` and of the Ray
engine, bit for bit, whatever the load; processes.py); `threads` trains them side by side in
this process, one CPU thread each; `loop` one after another. A round is split into chunks of
`--engine-chunk` clients (0: as many as the device's free memory holds); a chunk that runs
out of GPU memory is retried in halves, never lost.
"""

from __future__ import annotations

import dataclasses
import os

import torch
from flwr.app import Context, RecordDict
from flwr.app.user_config import UserConfig
from flwr.clientapp import ClientApp

from clients.attacks import attack_of
from fedpfn.core import protocol
from fedpfn.core.config import RunConfig
from fedpfn.core.groups import ENGINE, Auto, Loop, Processes, Threads, Vmap
from fedpfn.core.settings import ConfigError
from fedpfn.core.training import pick_device
from fedpfn.core.user_code import call_user, code_paths, is_code
from fedpfn.runtime.engines.actors import RayRunner, start_ray
from fedpfn.runtime.engines.processes import ProcessRunner, worker_count
from fedpfn.runtime.engines.runner import CohortRunner, auto_reason, device_of, mode_of
from fedpfn.runtime.resources import usable_cores
from fedpfn.runtime.engines.grid import RUN_ID, SERVER_NODE, BatchedGrid, Runner, act_as_server
from fedpfn.runtime.engines.prepared import ClientJob
from fedpfn.runtime.engines.result import CohortResult
from fedpfn.runtime.engines.placement import batched_slots, check_placement
from fedpfn.runtime.lifecycle import RunPlan
from fedpfn.runtime.server_app import make_server_app
from fedpfn.runtime.tracking import Tracking

# --- placement ------------------------------------------------------------------------------


def workers_of(cfg: RunConfig) -> int | None:
    """Ray actors to spread a round over: set, or one per GPU of a multi-GPU machine; with
    `ray_address` (None here) as many as placement.plan_actors finds on the cluster."""
    if (workers := getattr(cfg.engine, "engine_workers", None)) is not None:  # processes mode has none
        return workers
    gpus = 0 if cfg.placement.ray_address else torch.cuda.device_count()
    return gpus if gpus > 1 else None


def uses_ray(cfg: RunConfig) -> bool:
    return bool(cfg.placement.ray_address) or workers_of(cfg) is not None


def prepare(cfg: RunConfig) -> RunConfig:
    """Refuse what this engine cannot do, before anything starts; nothing is resolved into the config.

    With Ray (actors here, or a cluster) the actors' plan is made and checked now: on a
    cluster that means joining it and reading its nodes (batched_slots).
    """
    if isinstance(cfg.engine, Processes) and cfg.placement.ray_address:
        raise ConfigError(
            "engine_mode: processes trains on this machine; with --ray-address each actor trains its share: "
            "use --engine-mode threads, loop or vmap (or auto)"
        )
    if isinstance(cfg.engine, Processes) and device_of(cfg).type == "cuda":
        raise ConfigError("engine_mode: processes trains on the CPU, and a GPU is visible: add --client-gpus 0, or use vmap")
    check_placement(cfg, uses_ray(cfg), batched_slots if uses_ray(cfg) else None)
    return cfg


def settle(run: RunPlan) -> tuple[RunPlan, str]:
    """`auto` resolved on this machine once the folder is checked, by the machine alone
    (runner.mode_of), with why, so that config.json says what computed the numbers and a resume
    continues in it (a GPU machine picks vmap, a CPU one processes or loop: they agree within
    rounding, not bit for bit). Ray actors resolve their own by the same rule."""
    cfg = run.cfg
    if not isinstance(cfg.engine, Auto) or uses_ray(cfg):
        return run, ""
    device = device_of(cfg)
    mode = mode_of(cfg, device)
    engine = ENGINE.changed(cfg.engine, engine_mode=mode.chosen_by["engine_mode"])
    return dataclasses.replace(run, cfg=dataclasses.replace(cfg, engine=engine)), auto_reason(device, mode)


def describe(cfg: RunConfig) -> str:
    """The header's compute line: the device, how a round runs, and why; or where the actors are."""
    placed = cfg.placement
    if uses_ray(cfg):
        slots = batched_slots(cfg)
        where = f"the Ray cluster at {placed.ray_address}" if placed.ray_address else "Ray on this machine"
        each = ", ".join(f"{s.node.name} {s.cpus} CPU" + (f" + {s.gpus} GPU" if s.gpus else "") for s in slots)
        return f"batched engine on {where}: a round's clients split over {len(slots)} actor(s) ({each}), each running the batched program"
    device = device_of(cfg)
    mode = mode_of(cfg, device)
    where = torch.cuda.get_device_name(device) if device.type == "cuda" else f"the CPU, {os.cpu_count()} cores"
    how = {
        Vmap: "all of a round's clients as one vmapped program"
        + (f", {chunk} per chunk" if (chunk := getattr(cfg.engine, "engine_chunk", 0)) else ", chunks as large as free memory holds"),
        Processes: f"clients dealt to {worker_count(cfg)} worker processes, one thread each",
        Threads: f"clients side by side on {len(usable_cores())} threads, one each",
        Loop: "one client after another",
    }[mode]
    return f"batched engine in this process on {where} ({device.type}): {how}; server evaluates on {pick_device()}"


def runner_of(cfg: RunConfig) -> CohortRunner | RayRunner | ProcessRunner:
    """What trains a round's cohort: Ray's actors, worker processes, or this process."""
    if uses_ray(cfg):
        return RayRunner(cfg, start_ray(cfg))
    if mode_of(cfg, device_of(cfg)) is Processes:
        return ProcessRunner(cfg, worker_count(cfg))
    return CohortRunner(cfg)


def naming_user_code(cfg: RunConfig, runner: Runner) -> Runner:
    """`runner`, where the clients run a user's code (a rule, a model, an attack by dotted path):
    what a round's training raises is one line naming that code, the round and the error (exit 2;
    130 for KeyboardInterrupt), not a traceback; which of them raised, a traceback would say (the
    processes mode's workers send the error alone). Without such code, fedpfn's own errors as they are."""
    paths = [*code_paths(cfg.algorithm), *(v for v in (cfg.task.model, attack_of(cfg).attack) if is_code(v))]
    if not paths:
        return runner

    def run_cohort(content: RecordDict, jobs: list[ClientJob]) -> CohortResult:
        server_round = content[protocol.CONFIG][protocol.SERVER_ROUND]
        what = f"round {server_round}: the clients' training, which runs {', '.join(paths)},"
        return call_user(what, None, lambda: runner(content, jobs))

    return run_cohort


def run(run: RunPlan, tracker: Tracking, app: ClientApp) -> None:
    """The rounds over a BatchedGrid, through the same ServerApp as the Ray engine."""
    act_as_server()
    runner = runner_of(run.cfg)
    grid = BatchedGrid(run.cfg, naming_user_code(run.cfg, runner), app)
    context = Context(run_id=RUN_ID, node_id=SERVER_NODE, node_config=UserConfig(), state=RecordDict(), run_config=UserConfig())
    try:
        make_server_app(run, tracker, train_grid=grid)(grid, context)
    finally:
        runner.close()
