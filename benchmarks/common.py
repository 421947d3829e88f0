"""Helpers shared by the benchmarks: load average, timing, process-tree memory, configs,
and a timed run of the real simulator.

The benchmarks are scripts (`python benchmarks/bench_x.py`), so this file is imported as
`common`: the script's folder is the first entry of `sys.path`, and Flower's Ray backend
passes the driver's `sys.path` to the Ray workers as PYTHONPATH, so the workers can
import it as well (`traced_client_app` below runs inside them).
"""

from __future__ import annotations

import atexit
import json
import math
import os
import platform
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run from anywhere, even without the editable install
    sys.path.insert(1, str(ROOT))

TRACE_ENV = "FEDPFN_BENCH_TRACE_DIR"


# --- machine and load ------------------------------------------------------------------


def load_average() -> str:
    """The 1, 5 and 15 minute load averages, as `uptime` prints them."""
    one, five, fifteen = os.getloadavg()
    return f"{one:.2f}, {five:.2f}, {fifteen:.2f}"


def machine_line() -> str:
    import torch

    return (
        f"{platform.node()}: {os.cpu_count()} logical CPUs, torch {torch.__version__} "
        f"(default threads {torch.get_num_threads()}), "
        f"CUDA {'yes' if torch.cuda.is_available() else 'no'}, python {platform.python_version()}"
    )


def print_header(title: str, settings: dict[str, Any]) -> None:
    print(f"== {title}")
    print(f"   machine: {machine_line()}")
    print(f"   load average at start: {load_average()}")
    print("   settings: " + ", ".join(f"{k}={v}" for k, v in settings.items()), flush=True)


def wait_for_quiet(max_load: float, max_wait: float) -> None:
    """Wait up to `max_wait` s for the 1-minute load average to drop below `max_load`."""
    if max_load <= 0:
        return
    deadline = time.monotonic() + max_wait
    while os.getloadavg()[0] > max_load and time.monotonic() < deadline:
        time.sleep(5)
    print(f"   load average before measuring: {load_average()}", flush=True)


# --- numbers ---------------------------------------------------------------------------


def median(values: Iterable[float]) -> float:
    values = [v for v in values if not math.isnan(v)]
    return statistics.median(values) if values else float("nan")


def spread(values: Sequence[float]) -> str:
    """`min..max` of a list of seconds, for showing how noisy a median is."""
    values = [v for v in values if not math.isnan(v)]
    if not values:
        return "-"
    return f"{min(values):.3f}..{max(values):.3f}"


def mib(n_bytes: float) -> float:
    return n_bytes / 2**20


def table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    """A plain fixed-width table; floats get 3 decimals unless already formatted."""

    def cell(v: Any) -> str:
        if isinstance(v, float):
            return "nan" if math.isnan(v) else f"{v:.3f}"
        return str(v)

    body = [[cell(v) for v in row] for row in rows]
    widths = [max(len(h), *(len(r[i]) for r in body)) if body else len(h) for i, h in enumerate(headers)]
    lines = ["  ".join(h.rjust(w) if i else h.ljust(w) for i, (h, w) in enumerate(zip(headers, widths)))]
    for row in body:
        lines.append("  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(row, widths))))
    return "\n".join(lines)


# --- process-tree memory -----------------------------------------------------------------


def _psutil():
    """psutil if importable; Ray ships a copy in ray/thirdparty_files that `import ray` exposes."""
    try:
        import psutil

        return psutil
    except ImportError:
        pass
    try:
        import psutil
        import ray  # noqa: F401  (puts ray/thirdparty_files on sys.path)

        return psutil
    except ImportError:
        return None


_PAGE = os.sysconf("SC_PAGE_SIZE")


def _proc_children(pid: int) -> list[int]:
    """All descendants of `pid`, read from /proc when psutil is missing."""
    parents: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as fh:
                stat = fh.read()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        parents.setdefault(ppid, []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        for child in parents.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def _statm(pid: int) -> tuple[int, int]:
    """(RSS, anonymous RSS) in bytes: statm's resident and resident - file/shmem pages."""
    with open(f"/proc/{pid}/statm") as fh:
        fields = fh.read().split()
    resident, shared = int(fields[1]), int(fields[2])
    return resident * _PAGE, (resident - shared) * _PAGE


def _role(pid: int) -> str:
    """driver, ray-core (gcs/raylet/monitors), actor (ClientAppActor), idle-worker, other."""
    if pid == os.getpid():
        return "driver"
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            cmd = fh.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return "other"
    if "ClientAppActor" in cmd:
        return "actor"
    if cmd.startswith("ray::IDLE") or "default_worker.py" in cmd:
        return "idle-worker"
    if cmd.startswith("ray::"):
        return "ray-worker"
    if any(k in cmd for k in ("gcs_server", "raylet", "log_monitor", "monitor.py", "dashboard", "ray/")):
        return "ray-core"
    return "other"


@dataclass
class MemorySample:
    t: float
    rss: int
    anon: int
    by_role: dict[str, int]
    processes: int


@dataclass
class TreeMemory:
    """Peak of the summed RSS of this process and all its descendants, sampled in a thread.

    RSS counts shared library pages once per process (libtorch is mapped by the driver and
    by every Ray worker), so the anonymous part (RSS less file-backed and shared-memory
    pages, from /proc/PID/statm) is reported next to it: that sum double-counts nothing
    except Ray's plasma store, which is shared memory and so falls out of it entirely.
    Sampling reads one small /proc file per process (about 20 us each).
    """

    interval: float = 0.2
    samples: list[MemorySample] = field(default_factory=list)
    marks: list[tuple[float, str]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._psutil = _psutil()
        self._roles: dict[int, str] = {}

    def _pids(self) -> list[int]:
        me = os.getpid()
        if self._psutil is not None:
            try:
                return [me] + [p.pid for p in self._psutil.Process(me).children(recursive=True)]
            except self._psutil.Error:
                pass
        return [me] + _proc_children(me)

    def sample(self) -> MemorySample:
        rss = anon = 0
        by_role: dict[str, int] = {}
        pids = self._pids()
        for pid in pids:
            try:
                r, a = _statm(pid)
            except (OSError, ValueError, IndexError):
                continue
            role = self._roles.get(pid)
            if role is None or role in ("idle-worker", "other"):  # an idle worker may become an actor
                role = self._roles[pid] = _role(pid)
            rss += r
            anon += a
            by_role[role] = by_role.get(role, 0) + r
        s = MemorySample(time.perf_counter(), rss, anon, by_role, len(pids))
        self.samples.append(s)
        return s

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(self.interval)

    def mark(self, label: str) -> None:
        """Remember a moment (e.g. 'steady rounds start') to split peaks by phase."""
        self.marks.append((time.perf_counter(), label))

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def peak(self, since: float = float("-inf"), until: float = float("inf")) -> MemorySample | None:
        window = [s for s in self.samples if since <= s.t <= until]
        return max(window, key=lambda s: s.rss) if window else None

    def peak_anon(self, since: float = float("-inf"), until: float = float("inf")) -> int:
        return max((s.anon for s in self.samples if since <= s.t <= until), default=0)


def self_peak_rss() -> int:
    """This process's own peak RSS (bytes), from getrusage."""
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


# --- CPU time per driver thread ---------------------------------------------------------

_CLK = os.sysconf("SC_CLK_TCK")


def thread_cpu() -> dict[str, float]:
    """CPU seconds so far of this process's Python threads, summed by target name.

    Flower's simulation threads are named after their targets ("Thread-7
    (add_messages_to_queue)"), so the polling loops can be told apart from the ServerApp.
    Threads that Python did not start (Ray's, torch's) are summed under "other".
    """
    out: dict[str, float] = {}
    known = set()
    for t in threading.enumerate():
        tid = t.native_id
        if tid is None:
            continue
        known.add(tid)
        name = t.name.split("(", 1)[1].rstrip(")") if "(" in t.name else t.name.split("-")[0]
        out[name] = out.get(name, 0.0) + _task_cpu(tid)
    total = 0.0
    for entry in os.listdir("/proc/self/task"):
        tid = int(entry)
        cpu = _task_cpu(tid)
        total += cpu
        if tid not in known:
            out["other"] = out.get("other", 0.0) + cpu
    out["total"] = total
    return out


def _task_cpu(tid: int) -> float:
    try:
        with open(f"/proc/self/task/{tid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / _CLK  # utime + stime
    except (OSError, IndexError, ValueError):
        return 0.0


def cpu_delta(after: dict[str, float], before: dict[str, float]) -> dict[str, float]:
    return {k: v - before.get(k, 0.0) for k, v in after.items()}


# --- configs ---------------------------------------------------------------------------


def bench_config(**overrides: Any):
    """A validated RunConfig writing into a throw-away folder (removed when the script exits)."""
    from fedpfn.config import RunConfig

    out = tempfile.mkdtemp(prefix="fedpfn-bench-")
    atexit.register(shutil.rmtree, out, ignore_errors=True)  # run folders are not kept
    overrides.setdefault("out", out)
    overrides.setdefault("overwrite", True)
    return RunConfig(**overrides).validated()


# --- a timed simulation ----------------------------------------------------------------


@dataclass
class SimTiming:
    """What one `simulate()` call spent where (seconds, perf_counter clock of the driver)."""

    total: float
    checks_and_folder: float  # check_runnable + run folder + partition plot (before Ray)
    server_init: float  # Federation.__init__ (model, strategy, test set) in the ServerApp thread
    node_wait: float  # discover_partitions start -> all nodes registered
    discover: float  # all nodes registered -> discover_partitions returns (polling + queries)
    start_to_round1: float  # simulate() call -> round 1 starts
    rounds: list[dict[str, float]]  # per round: seconds, train, evaluate
    finish: float  # after the last round: final model, plot, summary
    teardown: float  # run end -> simulate() returns (Ray shutdown)
    client_traces: list[dict[str, Any]]  # one per client update (see traced_client_app)
    summary: dict[str, Any]
    driver_cpu: list[float] = field(default_factory=list)  # driver CPU seconds per round
    thread_cpu: list[dict[str, float]] = field(default_factory=list)  # per round, by driver thread
    events: dict[str, float] = field(default_factory=dict)  # raw perf_counter times
    wall_offset: float = 0.0  # time.time() - time.perf_counter(), to place actor traces
    discover_cpu: dict[str, float] = field(default_factory=dict)  # driver thread CPU in discover


def _patch(obj: Any, name: str, wrapper_factory: Callable[[Callable], Callable]) -> Callable[[], None]:
    original = getattr(obj, name)
    setattr(obj, name, wrapper_factory(original))
    return lambda: setattr(obj, name, original)


def timed_simulation(cfg, trace: bool = True, memory: TreeMemory | None = None) -> SimTiming:
    """Run the real `fedpfn.simulation.simulate(cfg)` and time its phases.

    The ServerApp runs in a thread of this process (Flower's `run_simulation`), so the
    phases are taken by wrapping `Federation` methods and `discover_partitions` for the
    length of the call; nothing in the code under test changes. With `trace`, the
    ClientApp is replaced by `traced_client_app`, which calls the real `train` and
    appends one line (process id, partition, round, seconds) per update to a file.
    """
    import fedpfn.app
    from fedpfn import server
    from fedpfn.simulation import simulate

    ev: dict[str, float] = {}
    ev_cpu: dict[str, dict[str, float]] = {}
    rounds: dict[int, dict[str, float]] = {}
    driver_cpu: list[float] = []
    threads: list[dict[str, float]] = []
    undo: list[Callable[[], None]] = []

    def wrap_init(orig):
        def init(self, *a, **k):
            ev["server_init_start"] = time.perf_counter()
            orig(self, *a, **k)
            ev["server_init_end"] = time.perf_counter()

        return init

    def wrap_discover(orig):
        def discover(grid, num_clients):
            # The real function runs unchanged (its 1 s polling included); a side thread
            # notes when all nodes were first registered, to split waiting from querying.
            ev["discover_start"] = time.perf_counter()
            ev_cpu["discover_start"] = thread_cpu()
            done = threading.Event()

            def poll():
                while not done.is_set():
                    if len(list(grid.get_node_ids())) >= num_clients:
                        ev["nodes_ready"] = time.perf_counter()
                        return
                    time.sleep(0.02)

            poller = threading.Thread(target=poll, daemon=True)
            poller.start()
            try:
                mapping = orig(grid, num_clients)
            finally:
                done.set()
                poller.join()
            ev["discover_end"] = time.perf_counter()
            ev_cpu["discover"] = cpu_delta(thread_cpu(), ev_cpu["discover_start"])
            return mapping

        return discover

    def wrap_train_round(orig):
        def train_round(self, server_round, nodes):
            if memory is not None:
                memory.mark(f"round {server_round}")
            cpu0 = time.process_time()
            threads0 = thread_cpu()
            t0 = time.perf_counter()
            out = orig(self, server_round, nodes)
            rounds[server_round] = {
                "start": t0,
                "train": time.perf_counter() - t0,
                "cpu0": cpu0,
                "threads0": threads0,
            }
            return out

        return train_round

    def wrap_evaluate(orig):
        def evaluate_global(self):
            t0 = time.perf_counter()
            out = orig(self)
            last = max(rounds) if rounds else None
            if last is not None and "evaluate" not in rounds[last]:
                rounds[last]["evaluate"] = time.perf_counter() - t0
                rounds[last]["end"] = time.perf_counter()
                driver_cpu.append(time.process_time() - rounds[last]["cpu0"])
                threads.append(cpu_delta(thread_cpu(), rounds[last]["threads0"]))
            return out

        return evaluate_global

    def wrap_finish(orig):
        def finish(self, wall):
            ev["finish_start"] = time.perf_counter()
            out = orig(self, wall)
            ev["finish_end"] = time.perf_counter()
            return out

        return finish

    undo.append(_patch(server.Federation, "__init__", wrap_init))
    undo.append(_patch(server, "discover_partitions", wrap_discover))
    undo.append(_patch(server.Federation, "train_round", wrap_train_round))
    undo.append(_patch(server.Federation, "evaluate_global", wrap_evaluate))
    undo.append(_patch(server.Federation, "finish", wrap_finish))
    trace_dir = tempfile.mkdtemp(prefix="fedpfn-trace-")
    if trace:
        os.environ[TRACE_ENV] = trace_dir
        undo.append(_patch(fedpfn.app, "client_app", lambda orig: traced_client_app))
    start = time.perf_counter()
    wall_offset = time.time() - start
    ev["start"] = start
    try:
        with _quiet_checks(ev):
            summary = simulate(cfg, show_progress=False)
    finally:
        end = time.perf_counter()
        for u in reversed(undo):
            u()
        os.environ.pop(TRACE_ENV, None)
    rows = []
    metrics = [json.loads(line) for line in (Path(cfg.run_dir) / "metrics.jsonl").read_text().splitlines()]
    for m in metrics:
        r = rounds.get(m["round"], {})
        rows.append(
            {
                "round": m["round"],
                "seconds": m["seconds"],
                "train": r.get("train", float("nan")),
                "evaluate": r.get("evaluate", float("nan")),
                "start": r.get("start", float("nan")),
                "end": r.get("end", float("nan")),
            }
        )
    traces = []
    for f in Path(trace_dir).glob("*.jsonl"):
        traces += [json.loads(line) for line in f.read_text().splitlines() if line.strip()]
    shutil.rmtree(trace_dir, ignore_errors=True)
    first = min(rounds.values(), key=lambda r: r["start"])["start"] if rounds else end
    return SimTiming(
        total=end - start,
        checks_and_folder=ev.get("checks_end", start) - start,
        server_init=ev.get("server_init_end", 0) - ev.get("server_init_start", 0),
        node_wait=ev.get("nodes_ready", 0) - ev.get("discover_start", 0),
        discover=ev.get("discover_end", 0) - ev.get("nodes_ready", 0),
        start_to_round1=first - start,
        rounds=rows,
        finish=ev.get("finish_end", 0) - ev.get("finish_start", 0),
        teardown=end - ev.get("finish_end", end),
        client_traces=traces,
        summary=summary,
        driver_cpu=driver_cpu,
        thread_cpu=threads,
        events=ev,
        wall_offset=wall_offset,
        discover_cpu=ev_cpu.get("discover", {}),
    )


@contextmanager
def _quiet_checks(ev: dict[str, float]):
    """Note when simulate() has finished its checks and folder, i.e. calls run_simulation."""
    import flwr.simulation

    orig = flwr.simulation.run_simulation

    def run_simulation(*a, **k):
        ev["checks_end"] = time.perf_counter()
        return orig(*a, **k)

    flwr.simulation.run_simulation = run_simulation
    try:
        yield
    finally:
        flwr.simulation.run_simulation = orig


# --- the traced ClientApp (runs inside the Ray actors) -----------------------------------


def _make_traced_app():
    from flwr.clientapp import ClientApp

    app = ClientApp()

    @app.train()
    def train(msg, context):
        import fedpfn.app as core

        t0 = time.perf_counter()
        reply = core.train(msg, context)
        seconds = time.perf_counter() - t0
        _trace(
            {
                "pid": os.getpid(),
                "partition": int(context.node_config["partition-id"]),
                "round": int(msg.content.config_records["config"]["server-round"]),
                "seconds": seconds,
                "end": time.time(),
                **_gpu_peak(),
            }
        )
        return reply

    @app.query()
    def query(msg, context):
        import fedpfn.app as core

        t0 = time.perf_counter()
        reply = core.query(msg, context)
        _trace({"pid": os.getpid(), "query": True, "seconds": time.perf_counter() - t0, "end": time.time()})
        return reply

    return app


def _gpu_peak() -> dict[str, int]:
    import torch

    if not torch.cuda.is_available() or not torch.cuda.is_initialized():
        return {}
    return {
        "cuda_max_allocated": int(torch.cuda.max_memory_allocated()),
        "cuda_max_reserved": int(torch.cuda.max_memory_reserved()),
    }


def _trace(row: dict[str, Any]) -> None:
    folder = os.environ.get(TRACE_ENV)
    if not folder:
        return
    with open(Path(folder) / f"{os.getpid()}.jsonl", "a") as fh:
        fh.write(json.dumps(row) + "\n")


traced_client_app = _make_traced_app()


def round_breakdown(sim: SimTiming, skip: int = 1) -> list[dict[str, float]]:
    """Per steady round: round, train phase, evaluate, summed client fit, busiest actor."""
    by_round: dict[int, list[dict[str, Any]]] = {}
    for t in sim.client_traces:
        if "round" in t:
            by_round.setdefault(t["round"], []).append(t)
    out = []
    for r in sim.rounds:
        if r["round"] <= skip:
            continue
        traces = by_round.get(r["round"], [])
        per_actor: dict[int, float] = {}
        for t in traces:
            per_actor[t["pid"]] = per_actor.get(t["pid"], 0.0) + t["seconds"]
        busiest = max(per_actor.values(), default=float("nan"))
        out.append(
            {
                "round": r["round"],
                "seconds": r["seconds"],
                "train": r["train"],
                "evaluate": r["evaluate"],
                "client_fit": sum(t["seconds"] for t in traces) if traces else float("nan"),
                "busiest": busiest,
                "overhead": r["train"] - busiest,
            }
        )
    return out


def query_profile(sim: SimTiming) -> dict[str, float]:
    """discover_partitions seen from the actors: queries, time in query(), first/last reply."""
    qs = sorted((t for t in sim.client_traces if t.get("query")), key=lambda t: t["end"])
    if not qs:
        return {}
    ready = sim.events.get("nodes_ready", float("nan"))
    first, last = qs[0]["end"] - sim.wall_offset, qs[-1]["end"] - sim.wall_offset
    return {
        "queries": len(qs),
        "actors": len({t["pid"] for t in qs}),
        "in_query_s": sum(t["seconds"] for t in qs),  # time inside the ClientApp's query()
        "to_first_reply_s": first - ready,  # nodes ready -> first query answered (actor start)
        "first_to_last_s": last - first,  # the queries themselves
        "last_to_return_s": sim.events.get("discover_end", float("nan")) - last,
    }


def steady(rows: list[dict[str, float]], key: str = "seconds", skip: int = 1) -> list[float]:
    """Per-round values without the first `skip` rounds (actor start, data loading)."""
    return [r[key] for r in rows if r["round"] > skip]
