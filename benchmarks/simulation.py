"""A timed run of the real simulator: the run's own records, plus the moments they lack.

`timed_simulation(cfg)` runs what `fedpfn.runtime.simulation.simulate` runs (the same checks, run
folder, Ray backend settings, ClientApp and `ServerLoop`) without its signal handling and
resume, which a benchmark does not need. Each round's wall time is the run's own
metrics.jsonl `seconds`, each client's training time its clients.jsonl `train_seconds`.
What those records lack (when each phase started, how a round splits into training and
evaluation, the driver's CPU by thread, the partition queries at start-up) comes from
`TimedLoop` and `TimedDirectory`: subclasses of the core's `ServerLoop` and
`NodeDirectory` that only note the time around their parents' methods. Nothing in the
code under test is patched. Every moment is a `time.time()`, the clock the actors' traces
use too.
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import tempfile
import time
from collections.abc import Collection, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import report  # noqa: F401  (puts the repository root on sys.path)
from cpu import cpu_delta, thread_cpu
from flwr.app import Context
from flwr.serverapp import Grid, ServerApp
from traced_app import TRACE_ENV, read_traces, traced_client_app

from fedpfn.core.config import RunConfig
from fedpfn.runtime.algorithms import load_config
from fedpfn.core.files import CLIENTS
from fedpfn.runtime.runfolder import RunFolder
from fedpfn.runtime.server import ServerLoop
from fedpfn.runtime.transport import NodeDirectory

NAN = float("nan")


def bench_config(**overrides: Any) -> RunConfig:
    """A checked RunConfig from flat settings, as typed (`partition="iid"`, `batch_size=60`), writing
    into a throw-away folder (removed when the script exits)."""
    out = tempfile.mkdtemp(prefix="fedpfn-bench-")
    atexit.register(shutil.rmtree, out, ignore_errors=True)  # run folders are not kept
    overrides.setdefault("out", out)
    overrides.setdefault("overwrite", True)
    return load_config(overrides)


# --- the moments the run's records lack --------------------------------------------------


@dataclass
class RoundClock:
    round: int
    start: float
    cpu_start: dict[str, float]
    train: float = NAN  # train_round: sample, send, local training, replies, aggregation
    evaluate: float = 0.0  # the server's evaluation of the global model (0: not this round)
    end: float = NAN
    cpu: dict[str, float] = field(default_factory=dict)  # driver CPU seconds by thread

    def close(self) -> None:
        self.end = time.time()
        self.cpu = cpu_delta(thread_cpu(), self.cpu_start)


@dataclass
class Clock:
    """What TimedLoop and TimedDirectory note; (start, end) pairs of time.time()."""

    server_init: tuple[float, float] = (NAN, NAN)
    discover: tuple[float, float] = (NAN, NAN)  # waiting for every partition's node
    discover_cpu: dict[str, float] = field(default_factory=dict)
    asks: list[tuple[float, float, int]] = field(default_factory=list)  # (start, end, nodes asked)
    rounds: dict[int, RoundClock] = field(default_factory=dict)
    finish: tuple[float, float] = (NAN, NAN)


class TimedDirectory(NodeDirectory):
    """The core's NodeDirectory, noting the start-up wait and each batch of partition queries.

    `chunk` > 0 asks at most that many new nodes at a time (bench_scale's chunked variant).
    """

    def __init__(self, grid: Grid, num_partitions: int, query_timeout: float, clock: Clock, chunk: int = 0):
        super().__init__(grid, num_partitions, query_timeout)
        self.clock, self.chunk = clock, chunk

    def wait_for(self, partitions: Collection[int], timeout: float, poll: float = 1.0) -> dict[int, int]:
        start, cpu = time.time(), thread_cpu()
        try:
            return super().wait_for(partitions, timeout, poll)
        finally:
            self.clock.discover = (start, time.time())
            self.clock.discover_cpu = cpu_delta(thread_cpu(), cpu)

    def _ask(self, node_ids: list[int]) -> None:
        size = self.chunk or max(len(node_ids), 1)
        for first in range(0, len(node_ids), size):
            batch, start = node_ids[first : first + size], time.time()
            super()._ask(batch)
            self.clock.asks.append((start, time.time(), len(batch)))


class TimedLoop(ServerLoop):
    """The core's ServerLoop, noting when its phases start and end; the work is the parent's."""

    def __init__(self, grid: Grid, cfg: RunConfig, folder: RunFolder, clock: Clock, chunk: int = 0) -> None:
        start = time.time()
        super().__init__(grid, cfg, folder, checkpoint=None)
        self.nodes = TimedDirectory(grid, cfg.federation.num_clients, cfg.federation.round_timeout, clock, chunk)
        self.clock = clock
        clock.server_init = (start, time.time())

    def train_round(self, server_round: int) -> dict[str, Any]:
        moment = self.clock.rounds[server_round] = RoundClock(server_round, time.time(), thread_cpu())
        record = super().train_round(server_round)
        moment.train = time.time() - moment.start
        moment.close()
        return record

    def evaluate_global(self) -> tuple[float, float]:
        start = time.time()
        result = super().evaluate_global()
        moment = self.clock.rounds[max(self.clock.rounds)]
        moment.evaluate = time.time() - start
        moment.close()
        return result

    def finish(self, wall_seconds: float) -> dict[str, Any]:
        start = time.time()
        try:
            return super().finish(wall_seconds)
        finally:
            self.clock.finish = (start, time.time())


# --- one timed run -----------------------------------------------------------------------


@dataclass(frozen=True)
class RoundTiming:
    round: int
    seconds: float  # metrics.jsonl: the whole round as the server counts it
    train: float  # sample, send, local training, replies, aggregation
    evaluate: float  # the server's evaluation of the global model
    start: float
    end: float
    driver_cpu: dict[str, float]  # CPU seconds of the driver's threads in this round
    client_fit: float  # the clients' train_seconds summed (clients.jsonl)
    busiest: float  # the actor with the most train_seconds this round (needs traces)

    @property
    def overhead(self) -> float:
        """Dispatch, idle time, transfers and aggregation beyond the busiest actor's training."""
        return self.train - self.busiest

    def breakdown(self) -> list[float]:
        """Where the round went, in the order of BREAKDOWN."""
        return [self.seconds, self.train, self.evaluate, self.client_fit, self.busiest, self.overhead]


BREAKDOWN = ("round", "train phase", "evaluate", "sum client fit", "busiest actor", "train - busiest")


@dataclass
class SimTiming:
    """One timed simulation: the run's records, the driver's clock and the actors' traces."""

    start: float
    checked: float  # checks and run folder done, Ray about to start
    end: float
    clock: Clock
    metrics: list[dict[str, Any]]  # metrics.jsonl
    clients: list[dict[str, Any]]  # clients.jsonl
    traces: list[dict[str, Any]]  # traced_app's lines (empty when untraced)

    @property
    def total(self) -> float:
        return self.end - self.start

    @property
    def phases(self) -> dict[str, float]:
        """Seconds of each start-up and shut-down phase, in order."""
        c = self.clock
        return {
            "checks+folder": self.checked - self.start,
            "server init": c.server_init[1] - c.server_init[0],
            "discover": c.discover[1] - c.discover[0],
            "of which queries": sum(end - start for start, end, _ in c.asks),
            "->round 1": c.rounds[1].start - self.start if 1 in c.rounds else NAN,
            "round 1": self.rounds[0].seconds if self.rounds else NAN,
            "finish": c.finish[1] - c.finish[0],
            "teardown": self.end - c.finish[1],
        }

    @cached_property
    def rounds(self) -> list[RoundTiming]:
        actor = {(t["round"], t["partition"]): t["pid"] for t in self.traces if "round" in t}
        out = []
        for row in self.metrics:
            n, moment = row["round"], self.clock.rounds[row["round"]]
            mine = [c for c in self.clients if c["round"] == n]
            fits = [(c["train_seconds"], actor.get((n, c["partition_id"]))) for c in mine]
            per_actor: dict[int, float] = {}
            for seconds, pid in fits:
                if pid is not None:
                    per_actor[pid] = per_actor.get(pid, 0.0) + seconds
            out.append(
                RoundTiming(
                    n, row["seconds"], moment.train, moment.evaluate, moment.start, moment.end, moment.cpu,
                    sum(seconds for seconds, _ in fits), max(per_actor.values(), default=NAN),
                )
            )  # fmt: skip
        return out


def steady(sim: SimTiming, skip: int = 1) -> list[RoundTiming]:
    """The rounds after the first `skip` (actors start, each loads the dataset in round 1)."""
    return [r for r in sim.rounds if r.round > skip]


def query_profile(sim: SimTiming) -> dict[str, float]:
    """The partition queries at start-up, seen from the actors (needs traces)."""
    queries = [t for t in sim.traces if t.get("query")]
    if not queries or not sim.clock.asks:
        return {}
    answered = sorted(t["end"] for t in queries)
    first_ask = sim.clock.asks[0][0]
    return {
        "queries": len(queries),
        "actors": len({t["pid"] for t in queries}),
        "in_query_s": sum(t["seconds"] for t in queries),  # inside the ClientApp's query()
        "wait_s": first_ask - sim.clock.discover[0],  # before any node was asked
        "to_first_reply_s": answered[0] - first_ask,  # mostly actors starting
        "first_to_last_s": answered[-1] - answered[0],  # the queries themselves
        "last_to_return_s": sim.clock.discover[1] - answered[-1],
    }


@contextmanager
def _trace_folder(enabled: bool) -> Iterator[Path | None]:
    """A folder the traced ClientApp writes into, named in the environment Ray workers inherit."""
    if not enabled:
        yield None
        return
    folder = Path(tempfile.mkdtemp(prefix="fedpfn-trace-"))
    os.environ[TRACE_ENV] = str(folder)
    try:
        yield folder
    finally:
        os.environ.pop(TRACE_ENV, None)
        shutil.rmtree(folder, ignore_errors=True)


def _server_app(cfg: RunConfig, folder: RunFolder, clock: Clock, chunk: int) -> ServerApp:
    app = ServerApp()

    @app.main()
    def main(grid: Grid, context: Context) -> None:
        TimedLoop(grid, cfg, folder, clock, chunk).run()

    return app


def timed_simulation(cfg: RunConfig, trace: bool = True, chunk: int = 0) -> SimTiming:
    """Run one simulation of `cfg` into its (new) run folder and time it.

    `trace`: run the traced ClientApp (actor of each update, GPU peaks, query times);
    `chunk`: ask at most this many nodes their partition at a time (0: all at once).
    """
    from fedpfn.runtime.client_app import client_app
    from fedpfn.runtime.flower import run_simulation
    from fedpfn.runtime.engines.ray import backend_config
    from fedpfn.runtime.simulation import check_runnable, quiet_flower

    clock, start = Clock(), time.time()
    check_runnable(cfg)
    folder = RunFolder(cfg.run_dir)
    folder.start(cfg.to_dict(), overwrite=cfg.output.overwrite)
    checked = time.time()
    quiet_flower()
    with _trace_folder(trace) as traces:
        run_simulation(
            server_app=_server_app(cfg, folder, clock, chunk),
            client_app=traced_client_app if trace else client_app,
            num_supernodes=cfg.federation.num_clients,
            backend_config=backend_config(cfg),
        )
        end = time.time()
        rows = read_traces(traces) if traces else []
    if not folder.is_finished():
        raise RuntimeError(f"the simulation did not finish; see {folder.path} and the log above")
    clients = [json.loads(line) for line in (folder.path / CLIENTS).read_text().splitlines() if line.strip()]
    return SimTiming(start, checked, end, clock, folder.read_metrics(), clients, rows)
