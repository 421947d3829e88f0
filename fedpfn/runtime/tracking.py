"""Where a run's numbers go besides its folder: the terminal, TensorBoard, Weights & Biases.

The server loop calls one `Tracking` object: `round_done(record, client_rows)` after every
round and `close(summary)` at the end. Each sink turns the same round into its own form;
TensorBoard and W&B get the same scalar names (`scalars`), and both the run's settings:
TensorBoard as hparams (with the final accuracy), W&B as its config, with runs grouped by
comparison (or by setting, over seeds). Neither package is a dependency of the default
install (`pip install -e '.[tracking]'`): they are imported only when asked for, and a
missing one is refused before any engine starts.
"""

from __future__ import annotations

import hashlib
import logging
import math
import os
from collections.abc import Iterator
from contextlib import contextmanager
from importlib import import_module
from pathlib import Path
from typing import Any, Protocol

from fedpfn.core.config import PLACEMENT, TRACKERS, RunConfig, RunFlags
from fedpfn.core.groups import Start
from fedpfn.core.files import COMPARISON_CONFIG, LOG
from fedpfn.core.settings import ConfigError, of_kind
from fedpfn.runtime.progress import Progress, header_lines
from fedpfn.runtime.recording import start_scores
from fedpfn.runtime.runfolder import RunFolder

log = logging.getLogger("fedpfn")

INSTALL = "pip install -e '.[tracking]'"
TENSORBOARD_WRITERS = ("tensorboardX", "torch.utils.tensorboard")  # the first importable one writes
WORST_FRACTION = 0.1  # `_worst10`: the mean of the lowest 10 % of clients (at least one)
LOCAL_KEYS = ("local_accuracy_before", "local_accuracy_after")  # clients.jsonl columns
CLIENT_KEYS = ("train_loss", "train_accuracy", *LOCAL_KEYS)  # logged per client


class Sink(Protocol):
    def round_done(self, record: dict[str, Any], client_rows: list[dict[str, Any]]) -> None: ...

    def close(self, summary: dict[str, Any] | None = None) -> None: ...


def _import(name: str) -> Any | None:
    try:
        return import_module(name)
    except ImportError:
        return None


def check_available(cfg: RunConfig) -> None:
    """Refuse `--tensorboard` / `--wandb` without their package, one line each."""
    problems = []
    if cfg.tracking.tensorboard and not any(_import(name) for name in TENSORBOARD_WRITERS):
        problems.append(f"--tensorboard needs the tensorboardX (or tensorboard) package: {INSTALL}")
    if cfg.tracking.wandb and _import("wandb") is None:
        problems.append(f"--wandb needs the wandb package: {INSTALL}")
    if problems:
        raise ConfigError("\n".join(problems))


# --- what a round reports ----------------------------------------------------------------


def local_test_summary(client_rows: list[dict[str, Any]]) -> dict[str, float | None]:
    """Mean and worst-10 % mean of the clients' local test accuracy, before and after training."""
    summary: dict[str, float | None] = {}
    for key in LOCAL_KEYS:
        values = sorted(row[key] for row in client_rows if row.get(key) is not None)
        worst = values[: max(1, math.ceil(WORST_FRACTION * len(values)))]
        summary[f"{key}_mean"] = sum(values) / len(values) if values else None
        summary[f"{key}_worst10"] = sum(worst) / len(worst) if values else None
    return summary


def scalars(record: dict[str, Any], client_rows: list[dict[str, Any]]) -> dict[str, float]:
    """One round as `group/name` scalars (TensorBoard's and W&B's names); nulls and NaN left out."""
    split = "val" if "val_accuracy" in record else "test"
    values: dict[str, Any] = {
        f"{split}/accuracy": record[f"{split}_accuracy"],
        f"{split}/loss": record[f"{split}_loss"],
        "train/loss": record["train_loss"],
        "comm/bytes_up": record["bytes_up"],
        "comm/bytes_down": record["bytes_down"],
        "time/round_seconds": record["seconds"],
        "clients/replies": record["num_clients"],
        "clients/failures": record["num_failures"],
    }
    for key in LOCAL_KEYS:
        for stat in ("mean", "worst10"):
            values[f"local_test/{key.removeprefix('local_')}_{stat}"] = record.get(f"{key}_{stat}")
    for key, value in record.items():  # --evaluate-clients: fed_eval/accuracy_mean, fed_eval/personal_accuracy_p10, ...
        if key.startswith("fed_eval_") and key != "fed_eval_worst_partition":
            values[f"fed_eval/{key.removeprefix('fed_eval_')}"] = value
    for row in client_rows:
        for key in CLIENT_KEYS:
            values[f"client_{key}/{row['partition_id']}"] = row.get(key)
    return {k: float(v) for k, v in values.items() if v is not None and math.isfinite(float(v))}


# --- sinks ---------------------------------------------------------------------------------


def run_settings(cfg: RunConfig) -> dict[str, bool | int | float | str]:
    """What the run computes, as TensorBoard's hparams take it: every setting but where it ran
    and where it wrote; a list as text, none as 'none'."""
    ignored = {*of_kind(RunFlags, "bookkeeping"), *PLACEMENT, *TRACKERS}
    return {key: _hparam(value) for key, value in cfg.to_dict().items() if key not in ignored}


def _hparam(value: Any) -> bool | int | float | str:
    if isinstance(value, tuple):
        return ",".join(map(str, value))
    return "none" if value is None else value


class TensorBoardSink:
    """Event files under RUN/tensorboard; a resumed run purges the steps it repeats. At the end,
    the run's settings as hparams beside its final accuracy (the HPARAMS tab compares runs)."""

    def __init__(self, path: Path, first_round: int, settings: dict[str, Any]) -> None:
        module = next(m for m in map(_import, TENSORBOARD_WRITERS) if m is not None)
        purge = {"purge_step": first_round} if first_round > 1 else {}
        self.writer = module.SummaryWriter(log_dir=str(path), **purge)
        self.settings = settings

    def round_done(self, record: dict[str, Any], client_rows: list[dict[str, Any]]) -> None:
        for tag, value in scalars(record, client_rows).items():
            self.writer.add_scalar(tag, value, global_step=record["round"])
        self.writer.flush()  # a killed run keeps every round it finished

    def close(self, summary: dict[str, Any] | None = None) -> None:
        if summary is not None:
            finals = (
                "final_test_accuracy",
                "last5_mean_accuracy",
                "final_val_accuracy",
                "last5_mean_val_accuracy",
            )
            metrics = {f"final/{key}": float(summary[key]) for key in finals if summary.get(key) is not None}
            self.writer.add_hparams(self.settings, metrics)
        self.writer.close()


def wandb_group(cfg: RunConfig, folder: RunFolder) -> str:
    """A comparison's runs share its folder's name; a lone run's seeds share its name without -s<seed>."""
    if (folder.path.parent / COMPARISON_CONFIG).is_file():
        return folder.path.parent.name
    return folder.path.name.removesuffix(f"-s{cfg.seed}")


class WandbSink:
    """One W&B run per run folder (a resume continues it); WANDB_MODE=offline writes RUN/wandb."""

    def __init__(self, cfg: RunConfig, folder: RunFolder) -> None:
        import wandb

        started = folder.read_provenance().get("started", "")
        run_id = hashlib.sha256(f"{folder.path.resolve()}|{started}".encode()).hexdigest()[:16]
        try:
            self.run = wandb.init(
                project=os.environ.get("WANDB_PROJECT", "fedpfn"),
                name=folder.path.name,
                group=wandb_group(cfg, folder),
                job_type=cfg.algorithm,
                tags=[f"seed {cfg.seed}"],
                id=run_id,
                resume="allow",
                dir=str(folder.path),
                config=cfg.to_dict(),
                settings=wandb.Settings(console="off"),  # run.log already keeps the terminal
            )
        except (wandb.errors.Error, OSError) as err:
            raise ConfigError(f"--wandb: {err}; set WANDB_MODE=offline to log without an account") from None

    def round_done(self, record: dict[str, Any], client_rows: list[dict[str, Any]]) -> None:
        self.run.log(scalars(record, client_rows), step=record["round"])

    def close(self, summary: dict[str, Any] | None = None) -> None:
        if summary is not None:
            self.run.summary.update({k: v for k, v in summary.items() if isinstance(v, int | float)})
        self.run.finish(exit_code=0 if summary is not None else 1)


class Tracking:
    """Every sink of a run behind one object; a sink that fails is dropped with a warning."""

    def __init__(self, sinks: list[Sink]) -> None:
        self.sinks = sinks
        self.closed = False

    def round_done(self, record: dict[str, Any], client_rows: list[dict[str, Any]]) -> None:
        for sink in list(self.sinks):
            try:
                sink.round_done(record, client_rows)
            except Exception as err:  # noqa: BLE001 - a logging sink never stops a run
                self.sinks.remove(sink)
                log.warning("%s failed and is closed: %s", type(sink).__name__, err)

    def close(self, summary: dict[str, Any] | None = None) -> None:
        """Idempotent: the loop closes with the summary, the caller's `finally` without."""
        if self.closed:
            return
        self.closed = True
        for sink in reversed(self.sinks):  # the terminal's summary last
            try:
                sink.close(summary)
            except Exception as err:  # noqa: BLE001
                log.warning("%s could not be closed: %s", type(sink).__name__, err)


def warn_meaningless(cfg: RunConfig) -> None:
    """Warn, below the header (terminal and run.log), where a setting leaves the result meaningless."""
    from strategies.registry import USER_RULE, build_user_strategy

    if ":" in cfg.server:  # a robust aggregator with too few replies a round (Krum)
        args = cfg.hyper(USER_RULE.namespace, USER_RULE.Params).server_args
        build_user_strategy(cfg.server, args, per_round=cfg.federation.clients_per_round)


@contextmanager
def tracked_run(
    cfg: RunConfig, folder: RunFolder, checkpoint: dict[str, Any] | None, compute: str, show: bool
) -> Iterator[Tracking]:
    """Print the header (terminal and run.log), open the sinks the config asks for, close them after.

    `compute` is the header's line on where clients train; `show` False keeps the terminal quiet
    (run.log is written all the same).
    """
    first_round = 1 + (int(checkpoint["round"]) if checkpoint else 0)
    start = start_scores(cfg) if isinstance(cfg.start, Start) and first_round == 1 else None  # round 0: the start file itself
    progress = Progress(cfg.federation.rounds, folder.path / LOG, show, first_round)
    progress.header(header_lines(cfg, first_round, compute, start))
    tracker = Tracking([progress])
    try:
        warn_meaningless(cfg)
        if cfg.tracking.tensorboard:
            tracker.sinks.append(TensorBoardSink(folder.path / "tensorboard", first_round, run_settings(cfg)))
        if cfg.tracking.wandb:
            tracker.sinks.append(WandbSink(cfg, folder))
        yield tracker
    finally:
        tracker.close()
