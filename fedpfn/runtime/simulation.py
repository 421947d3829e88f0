"""One simulation on one of the engines (fedpfn.runtime.engines), from a validated config.

Everything that can be refused is checked before an engine starts and before the run folder
is touched: settings, data files, the partition, the server strategy, resources, the folder and
(on resume) the checkpoint, metrics and client state. A run folder is marked finished
(`summary.json`) only by a run that reached its last round. SIGINT and SIGTERM stop a run
within seconds at any moment (start-up included), leaving the folder resumable from its
last checkpoint, and the processes the run started (Ray's) stop with it, even after kill -9.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import shlex
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from types import FrameType
from pathlib import Path
from typing import Any

from fedpfn.core.cache import client_indices, dataset_for, initial_model
from fedpfn.core.models import EVAL_TRIAL, try_on_data
from fedpfn.core.config import (
    MOVABLE,
    NOT_IN_FINGERPRINT,
    PLACEMENT,
    TRACKERS,
    ConfigError,
    RunConfig,
)
from fedpfn.core.groups import Auto, Vmap
from fedpfn.core.data import DataError, find_data_problem
from fedpfn.core.files import LOCK, LOG, append_text, stop_writing
from fedpfn.core.hyper import flat_view
from fedpfn.core.user_code import CODE_SETTINGS, code_paths, is_code, keep_out_of_imports
from fedpfn.runtime import env, lifecycle, reaper
from fedpfn.runtime.algorithms import parse_config, validated
from fedpfn.runtime.client_app import client_app
from fedpfn.runtime.engines.registry import ENGINES
from fedpfn.runtime.runfolder import RunFolder
from fedpfn.runtime.tracking import check_available
from partitions import PartitionError

env.flower_defaults()
# Ray's core worker installs a native SIGTERM handler that prints a stack dump (absl's failure
# signal handler) before passing the signal on; a stop is not a crash, so it stays out.
os.environ.setdefault("RAY_DISABLE_FAILURE_SIGNAL_HANDLER", "1")

log = logging.getLogger("fedpfn")
STOP_GRACE_SECONDS = 8.0  # after a signal, the process is gone within this long, whatever it was doing
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def check_present(cfg: RunConfig) -> None:
    """Trackers and the data's files, looked for without reading or making anything."""
    check_available(cfg)
    problem = find_data_problem(cfg.task.dataset, cfg.task.data_root, cfg.task.download)
    if problem:
        raise ConfigError(problem)


def check_runnable(cfg: RunConfig) -> None:
    """Raise ConfigError for anything that would fail after start-up: trackers, data, partition."""
    check_present(cfg)
    try:
        model = initial_model(cfg)  # refuses images too small, and a start file (--init) that does not fit
        client_indices(cfg)
        if is_code(cfg.task.model):
            data = dataset_for(cfg)
            batch = slice(0, cfg.local.batch_size)
            try_on_data(model, cfg.task.model, (data.train_x[batch], data.train_y[batch]), data.test_x[:EVAL_TRIAL])
    except (DataError, PartitionError, ValueError) as err:
        raise ConfigError(str(err)) from None


class SignalStop:
    """SIGINT and SIGTERM end a run the same way at any moment: one line (with the resume
    command once the folder is claimed), exit 130 or 143 at once, and the run's processes
    (Ray's) stopped by the watcher that sees this one go (fedpfn.runtime.reaper).

    Two things stood in the way. Ray's `ray.init` installs its own SIGTERM handler (a
    `sys.exit` that ended in Ray's abort, exit 134), so while a run is held no library may
    replace the handlers (`signal.signal` refuses for these two signals). And a Python
    handler runs only when the main thread returns to Python, which it may not do for long
    inside Ray's start: the signal also wakes a thread through `signal.set_wakeup_fd`,
    which stops the process whatever the main thread is doing. Whichever comes first stops
    it; a watchdog ends the process after STOP_GRACE_SECONDS in any case.
    """

    def __init__(self, folder: RunFolder) -> None:
        self.folder = folder
        self.stopping = threading.Lock()

    def stop(self, signum: int) -> None:
        """Record nothing more, say where the run stopped, exit; once, from any thread."""
        if not self.stopping.acquire(blocking=False):
            # Another thread is ending the process. Return rather than wait: this may be the main
            # thread's handler, interrupting a write that the other thread waits for (stop_writing).
            return
        code = 128 + signum
        threading.Timer(STOP_GRACE_SECONDS, os._exit, args=(code,)).start()
        may_write = stop_writing()  # the round in flight is not recorded: its workers are about to go
        self.report(may_write)
        os._exit(code)  # before Ray's processes go: its core worker would exit 1 on seeing its raylet die

    def report(self, may_write: bool) -> None:
        """The run's last line, on the terminal and, once this process holds the folder and no
        write is stuck, in run.log; the lock file goes in any case."""
        held = self.folder.held_here()
        if held:
            line = self.folder.stop_message()
        else:
            line = f"stopped before the run started; nothing was written to {self.folder.path}"
        with suppress(OSError, ValueError):
            print(f"\n{line}", file=sys.stderr, flush=True)
        logging.disable(logging.CRITICAL)  # the line above is the last one: no failures of stopped workers
        if held:
            if may_write:
                with suppress(OSError):
                    append_text(self.folder.path / LOG, line + "\n")
            (self.folder.path / LOCK).unlink(missing_ok=True)
        else:  # the stop may have come between the lock file's creation and its lock
            self.folder.remove_stale_lock()

    def handler(self, signum: int, frame: FrameType | None) -> None:
        self.stop(signum)

    def listen(self, read_fd: int) -> None:
        """The wakeup fd's bytes are signal numbers; the pipe closes when the run ends."""
        while data := os.read(read_fd, 64):
            for signum in data:
                if signum in STOP_SIGNALS:
                    self.stop(signum)


@contextmanager
def _handlers_kept(handler: Callable[[int, FrameType | None], None]) -> Iterator[None]:
    """`handler` for SIGINT and SIGTERM, which nothing else may replace until the block ends."""
    original = signal.signal

    def guarded(signalnum: int, new: Any) -> Any:
        if signalnum in STOP_SIGNALS:
            return handler  # refused quietly: Ray's ray.init asks for SIGTERM
        return original(signalnum, new)

    previous = {sig: original(sig, handler) for sig in STOP_SIGNALS}
    signal.signal = guarded
    try:
        yield
    finally:
        signal.signal = original
        for sig, old in previous.items():
            original(sig, old)


@contextmanager
def _woken_on_signals(listen: Callable[[int], None]) -> Iterator[None]:
    """A thread running `listen(fd)`, whose fd receives each signal's number as it arrives."""
    read_fd, write_fd = os.pipe()
    os.set_blocking(write_fd, False)
    listener = threading.Thread(target=listen, args=(read_fd,), name="fedpfn-signals", daemon=True)
    listener.start()
    previous = signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
    try:
        yield
    finally:
        signal.set_wakeup_fd(previous)
        os.close(write_fd)
        listener.join()
        os.close(read_fd)


@contextmanager
def stop_on_signals(folder: RunFolder) -> Iterator[None]:
    """SIGINT/SIGTERM anywhere in the block (start-up included): see SignalStop. The run's
    processes are also stopped if this one is killed (kill -9): fedpfn.runtime.reaper."""
    if threading.current_thread() is not threading.main_thread():
        yield  # only the main thread may handle signals (a caller's own thread: theirs to handle)
        return
    stop = SignalStop(folder)
    watcher = reaper.start_watcher(keep=reaper.descendants([os.getpid()]))  # processes older than the run
    try:
        with _handlers_kept(stop.handler), _woken_on_signals(stop.listen):
            yield
    finally:
        reaper.stop_watcher(watcher)


def quiet_flower() -> None:
    """Flower logs every sampling and aggregation step; our lines say enough."""
    logging.getLogger("flwr").setLevel(logging.CRITICAL)


def simulate(cfg: RunConfig, resume: bool = False, show_progress: bool = True) -> dict[str, Any]:
    """Run (or resume) one simulation on the config's engine and return its summary."""
    engine = ENGINES[cfg.engine.name]
    cfg = cfg.in_folder(str(cfg.run_dir.resolve()))  # workers find it from any folder
    with stop_on_signals(RunFolder(cfg.run_dir)):
        check_present(cfg)
        cfg = engine.prepare(cfg)
        run = lifecycle.plan(cfg, resume)  # the folder and every part of a checkpoint, nothing written
        check_runnable(cfg)
        quiet_flower()
        run, why = engine.settle(run)  # config.json records what the engine resolved (auto)
        claimed = lifecycle.claimed(run, cfg.engine.name)
        compute = engine.describe(run.cfg) + (f" ({why})" if why else "")
        with claimed, lifecycle.tracking(run, compute, show_progress) as tracker:
            engine.run(run, tracker, client_app)
    if not run.folder.is_finished():
        raise RuntimeError(f"the simulation ended without finishing; see {run.folder.path}")
    return run.folder.read_summary()


def arithmetic(cfg: RunConfig) -> str | None:
    """'vmap', 'per client' (loop, processes, threads and Ray agree bit for bit), or None (auto: not known)."""
    if isinstance(cfg.engine, Auto):
        return None
    return "vmap" if isinstance(cfg.engine, Vmap) else "per client"


def placement(cfg: RunConfig) -> str:
    return f"engine {cfg.engine.name}" + (f", mode {cfg.engine.mode}" if cfg.engine.name == "batched" else "")


def resume_config(run_dir: str, overrides: dict[str, Any]) -> RunConfig:
    """The settings a run folder was started with; `overrides` may only extend `rounds`
    (and switch `--tensorboard` / `--wandb`, which log the numbers but never change them, or
    move it: `--engine`, `--ray-address`, `--client-cpus`, ...; it stays where it ran otherwise).

    Any other flag that differs from the run's value is refused: a resumed run keeps its
    settings, so its numbers stay those of one uninterrupted run. A run folder is data: what it
    names is neither imported nor downloaded unless this command asks too (check_folder_code,
    check_folder_download).
    """
    folder = resumable_folder(run_dir)
    raw = folder.read_config()
    check_folder_code(raw, overrides, folder.path)
    folder.check_belongs({k: v for k, v in raw.items() if k not in NOT_IN_FINGERPRINT})
    stored = parse_config(raw)
    check_folder_download(stored, overrides)
    requested = parse_config({**stored.to_dict(), **overrides})
    conflicts = requested.differences(stored, ignore=("out", "rounds", "overwrite", *PLACEMENT, *TRACKERS))
    if conflicts:
        raise ConfigError(
            f"resume: the run in '{run_dir}' was made with other settings ({'; '.join(conflicts)}); "
            "a resumed run keeps its settings (only --rounds may extend it)"
        )
    asked, ran = requested.federation.rounds, stored.federation.rounds
    if asked < ran:
        raise ConfigError(f"resume: --rounds {asked} is fewer than the run's {ran}")
    if folder.is_finished():
        if asked == ran:
            raise ConfigError(f"resume: '{run_dir}' is finished ({ran} rounds); pass --rounds N to continue it to N rounds")
        folder.check_usable()
    switched = {name: getattr(requested, name) for name in MOVABLE}  # may change on resume
    moved = stored.in_folder(str(folder.path), overwrite=False)
    longer = dataclasses.replace(moved.federation, rounds=asked)
    cfg = dataclasses.replace(moved, federation=longer, unused=requested.unused, **switched)
    cfg = validated(cfg, given=set(overrides))
    if arithmetic(stored) and arithmetic(cfg) and arithmetic(stored) != arithmetic(cfg):
        print(
            f"warning: resume: the run trained on {placement(stored)} and continues on {placement(cfg)}: its "
            "numbers from here on agree with an uninterrupted run's within rounding, not bit for bit "
            "(vmap sums in another order than loop, threads and ray, which agree bit for bit)",
            file=sys.stderr, flush=True,
        )  # fmt: skip
    return cfg


def check_folder_code(raw: dict[str, Any], overrides: dict[str, Any], folder: Path) -> None:
    """A run folder is data: whoever could write it (a shared or downloaded folder) must not choose
    code that runs, whatever its fingerprint says. Every setting that may be code (CODE_SETTINGS:
    a client rule, server, wrapper, mod, model, dataset or attack as module:Name) is imported only when
    this command names the same (fedpfn.core.user_code), and never from a module inside the
    folder, even one that holds only its config.json."""
    keep_out_of_imports(folder)
    nouns = ("client rule", "server", "server's wrapper", "client mod", "model builder", "dataset loader",
             "attack")  # fmt: skip
    for setting, noun in zip(CODE_SETTINGS, nouns, strict=True):
        stored = flat_view(raw).get(setting)  # a plug-in's by name or namespaced (plugins.server_wrap)
        if not code_paths(stored):
            continue
        given = overrides.get(setting)
        if given != stored:
            now = f"; this command names '{given}'" if given is not None else ""
            raise ConfigError(
                f"resume: the run's {noun} is the class '{stored}', which only its config.json names{now}; fedpfn "
                f"imports code a command names, never a file: pass --{setting.replace('_', '-')} "
                f"{shlex.quote(str(stored))} to resume it"
            )


def check_folder_download(stored: RunConfig, overrides: dict[str, Any]) -> None:
    """A file never decides what is downloaded where: only a command's `--download` does."""
    missing = find_data_problem(stored.task.dataset, stored.task.data_root, download=False)
    if stored.task.download and missing and "download" not in overrides:
        raise ConfigError(
            f"resume: {missing.split(';')[0]}, and only the run's config.json asks to download it there; a file "
            "never decides what is downloaded where: pass --download to allow it"
        )


def resumable_folder(run_dir: str) -> RunFolder:
    """The folder `--resume` names, if it holds a run whose files can be read without following a link."""
    if not str(run_dir).strip():
        raise ConfigError("resume: no folder given; pass --resume DIR with the run folder to continue")
    folder = RunFolder(run_dir)
    folder.check_path()
    if not folder.holds_run():
        raise ConfigError(f"resume: '{run_dir}' holds no run (no config.json)")
    folder.check_links()
    return folder


