"""The Flower ServerApp: `make_server_app` for a run checked and claimed by run_sim.py's
engines, and `server_app` for `flwr run` (deployment), which checks and claims its own."""

from __future__ import annotations

import logging
import time

from flwr.app import Context
from flwr.serverapp import Grid, ServerApp

from fedpfn.core.config import PLACEMENT, TRACKERS, ConfigError, RunConfig
from fedpfn.core.user_code import code_settings, name_code
from fedpfn.runtime import env
from fedpfn.core.hyper import one_value_each
from fedpfn.runtime.algorithms import flower_run_config, from_run_config, load_config, parse_config
from fedpfn.runtime.lifecycle import RunPlan, claimed, plan, serve, tracking
from fedpfn.runtime.plugins import empty_plugins
from fedpfn.runtime.runfolder import RunFolder
from fedpfn.runtime.server import FederationError
from fedpfn.runtime.tracking import Tracking, check_available
from fedpfn.runtime.transport import TrainGrid

# The switches this process found unset: set now for what it starts, but its own Flower read them
# when it was imported, before this module (under `flwr run`); deployed_main says so.
DEFAULTED = env.flower_defaults()
SIMULATED_NODES_SECONDS = 10.0  # a simulation registers its nodes as its ServerApp starts
log = logging.getLogger("fedpfn")


def make_server_app(run: RunPlan, tracker: Tracking | None = None, train_grid: TrainGrid | None = None) -> ServerApp:
    """A ServerApp for a run checked and claimed by the caller (run_sim.py's engines); `train_grid`:
    what its rounds train through, when not the grid Flower hands it (the batched engine's)."""
    app = ServerApp()

    @app.main()
    def main(grid: Grid, context: Context) -> None:
        serve(grid, run, tracker, train_grid)

    return app


server_app = ServerApp()


@server_app.main()
def deployed_main(grid: Grid, context: Context) -> None:
    """`flwr run`: settings come from `[tool.flwr.app.config]` and `--run-config`.

    An unfinished run of the same settings in `out` is resumed from its checkpoint; a
    finished one, or one of other settings, is refused unless `overwrite=true`. Errors are
    raised, so that Flower shows them as the run's status (`flwr ls`).
    """
    problem = env.runtime_env_problem()
    if problem is not None:
        raise RuntimeError(problem)
    values = from_run_config(dict(context.run_config))
    one_value_each(values, "flwr run's run config", declared=flower_run_config())  # as a preset's
    name_code(*code_settings(values))  # flwr run's command
    cfg = load_config(values)
    if empty := empty_plugins(cfg, {str(key).replace("-", "_") for key in grid.run.override_config}):
        raise ConfigError("\n".join(empty))  # pyproject's own '' is not given; the user's is refused
    check_simulated_nodes(grid, cfg.federation.num_clients)
    cfg = cfg.in_folder(str(cfg.run_dir.resolve()))  # relative: to the SuperLink's folder
    run = plan(cfg, resume=resumes_in_place(cfg))
    check_available(cfg)
    with claimed(run, "deployment"), tracking(run, "deployment: clients train on the SuperNodes") as tracker:
        if "FLWR_TELEMETRY_ENABLED" in DEFAULTED:
            log.warning(
                "Flower's telemetry is on in this SuperLink's processes (started without "
                "FLWR_TELEMETRY_ENABLED=0); start it from a shell that ran . .venv/bin/activate to turn it off"
            )
        serve(grid, run, tracker)


def check_simulated_nodes(grid: Grid, num_clients: int) -> None:
    """Under a simulation SuperLink every node exists from the start: refuse another count at once.

    Flower numbers its simulated nodes' partitions 0..num-supernodes-1 (default 2), so with
    another count than num-clients the run could not be what was asked; found here, before the
    run folder is touched, rather than after Ray started and the nodes answered. A deployment's
    nodes connect over time, so its grid is left to the server loop's wait.
    """
    from flwr.superlink.grid.inmemory_grid import InMemoryGrid  # the grid of Flower's simulation

    if not isinstance(grid, InMemoryGrid):
        return
    deadline, seen = time.monotonic() + SIMULATED_NODES_SECONDS, -1
    while (nodes := list(grid.get_node_ids())) or time.monotonic() < deadline:
        if nodes and len(nodes) == seen:  # the same count twice: registration is over
            break
        seen = len(nodes)
        time.sleep(0.25)
    if len(nodes) != num_clients:
        raise FederationError(
            f"num-clients is {num_clients} but this simulation has {len(nodes)} SuperNodes (Flower's default "
            f'is 2): run it with --federation-config "num-supernodes={num_clients}", or set '
            f"num-clients={len(nodes)} in --run-config"
        )


def resumes_in_place(cfg: RunConfig) -> bool:
    """Whether `flwr run` continues the run in `out`: unfinished, of the same settings, no overwrite."""
    folder = RunFolder(cfg.run_dir)
    if not folder.holds_run() or cfg.output.overwrite:
        return False
    if folder.is_finished():
        raise RuntimeError(
            f"out: '{folder.path}' holds a finished run; set overwrite=true in --run-config to replace it, "
            "or another out"
        )
    stored = parse_config(folder.read_config())
    differences = cfg.differences(stored, ignore=("out", "overwrite", *PLACEMENT, *TRACKERS))
    if differences:
        raise RuntimeError(
            f"out: '{folder.path}' holds a run of other settings ({'; '.join(differences)}); "
            "set another out, or overwrite=true in --run-config to replace it"
        )
    return True
