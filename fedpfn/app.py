"""The Flower app: one ClientApp and one ServerApp, for simulation and deployment alike.

`flwr run .` loads `client_app` and `server_app` from here (see pyproject's
`[tool.flwr.app]`); `run_sim.py` uses the same ClientApp with a ServerApp built around
an already validated config.
"""

from __future__ import annotations

import os
from functools import lru_cache

import numpy as np
import torch
from flwr.app import ConfigRecord, Context, Message, RecordDict
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid, ServerApp

from clients import client_class
from fedpfn.config import ConfigError, RunConfig
from fedpfn.results import RunFolder
from fedpfn.server import Federation, Progress
from fedpfn.training import pick_device

os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")
os.environ.setdefault("FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION", "1")
os.environ.setdefault("FLWR_DISABLE_UPDATE_CHECK", "1")


class SimulatedFailure(RuntimeError):
    """Raised on purpose by `--simulate-failures` to exercise the server's fault handling."""


@lru_cache(maxsize=8)
def _config(config_json: str) -> RunConfig:
    return RunConfig.from_json(config_json)


def fails_this_round(cfg: RunConfig, server_round: int, partition_id: int) -> bool:
    """Seeded, so a rerun (or a resumed run) sees the same failures."""
    if cfg.simulate_failures <= 0:
        return False
    rng = np.random.default_rng([cfg.seed, server_round, partition_id, 0xFA11])
    return bool(rng.random() < cfg.simulate_failures)


client_app = ClientApp()


@client_app.train()
def train(msg: Message, context: Context) -> Message:
    config = msg.content.config_records["config"]
    cfg = _config(str(config["run-config"]))
    partition_id = int(context.node_config["partition-id"])
    server_round = int(config["server-round"])
    if fails_this_round(cfg, server_round, partition_id):
        raise SimulatedFailure(f"client {partition_id} failed in round {server_round} (simulated)")
    torch.set_num_threads(max(1, int(cfg.client_cpus)))
    device = pick_device(want_gpu=cfg.client_gpus > 0)
    client = client_class(cfg)(cfg, partition_id, context.state, device)
    return Message(content=client.fit(msg.content), reply_to=msg)


@client_app.query()
def query(msg: Message, context: Context) -> Message:
    """Tell the server which partition this node holds (it only knows node ids)."""
    node = ConfigRecord({"partition-id": int(context.node_config["partition-id"])})
    return Message(content=RecordDict({"node": node}), reply_to=msg)


def make_server_app(cfg: RunConfig, folder: RunFolder, show_progress: bool = True) -> ServerApp:
    """A ServerApp for a config validated by the caller (the simulation path)."""
    app = ServerApp()

    @app.main()
    def main(grid: Grid, context: Context) -> None:
        Federation(grid, cfg, folder).run(Progress(cfg.rounds) if show_progress else None)

    return app


server_app = ServerApp()


@server_app.main()
def deployed_main(grid: Grid, context: Context) -> None:
    """`flwr run`: settings come from `[tool.flwr.app.config]` and `--run-config`.

    An unfinished run with the same settings in `out` is resumed from its checkpoint.
    """
    cfg = RunConfig.from_dict(dict(context.run_config)).validated()
    folder = RunFolder(cfg.run_dir)
    with folder.exclusive():
        run_deployed(grid, cfg, folder)


def run_deployed(grid: Grid, cfg: RunConfig, folder: RunFolder) -> None:
    """Start the run in `folder`, or resume it when it is this config's unfinished run."""
    resume = folder.holds_run() and not cfg.overwrite and folder.load_checkpoint() is not None
    if resume and folder.load_config().to_dict() != cfg.to_dict():
        raise ConfigError(f"out: '{folder.path}' holds a run with other settings; pass overwrite=true")
    if resume and folder.is_finished():
        raise ConfigError(f"out: '{folder.path}' holds a finished run; pass overwrite=true to replace it")
    if not resume:
        folder.start(cfg, overwrite=cfg.overwrite)
    Federation(grid, cfg, folder).run(Progress(cfg.rounds))
