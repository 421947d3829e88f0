"""`fedpfn study status` and `fedpfn study run`: every cell planned and checked before any starts.

A cell goes through its command's one primitive (fedpfn.study.commands; `fedpfn run`'s is
fedpfn.runtime.ensure.ensure_run): a finished cell of the same settings is reused, a stopped one
resumed, a missing one started, and a folder that holds other settings refused, for every cell,
before the first runs. `--jobs N` runs N cells
at a time, each in a process of its own (`fedpfn study run FILE --cell FOLDER`), at most one
per core. Tuning cells run first; the main cells then take the values they chose. A study's
parts (fedpfn.study.spec) are planned, shown and run after its own cells, each by its command.
Each cell run (not one reused) appends its CPU and wall seconds to the study's runs folder's
cpu.jsonl (TIMES), what a page may say a study cost.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from queue import Queue
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

from fedpfn.runtime import reaper
from fedpfn.runtime.children import Children, python_child
from fedpfn.core.files import append_text
from fedpfn.runtime.progress import duration
from fedpfn.runtime.resources import core_shares, usable_cores
from fedpfn.study.cells import Cell, Configure, choices, command_of, config_of, main_cells, tuning_cells
from fedpfn.study.commands import Command, rounds_done
from fedpfn.study.places import folder_problem, linked
from fedpfn.study.spec import Spec, StudyError

WAITING = "waiting for the tuning runs"
TIMES = "cpu.jsonl"  # in the study's runs folder: one line per cell run, {"cell", "cpu_s", "wall_s"}


@dataclass
class Planned:
    """A cell, its config, and its state (done, running, stopped, missing, waiting, refused: ...)."""

    cell: Cell
    cfg: Any  # the command's checked config (`fedpfn run`'s: a RunConfig)
    state: str


def plan(spec: Spec, configure: Configure) -> list[Planned]:
    """Every cell with its checked config and state; a flag its command refuses, a cell reached
    through a symbolic link (fedpfn.study.places) or two cells of one folder is a StudyError."""
    command = command_of(spec.command, configure)
    seen: dict[Path, Cell] = {}
    for cell in [*tuning_cells(spec), *main_cells(spec)]:  # before any is read: status reads them too
        if (problem := linked(cell.folder, "runs")) is not None:
            raise spec.refuse(problem)
        if (other := seen.setdefault(cell.folder, cell)) is not cell:
            raise spec.refuse(f"cells '{other.label()}' and '{cell.label()}' share the folder {cell.folder}; give a "
                              "cell pattern that tells them apart ({arm}, {seed}, {value} and each axis)")  # fmt: skip
    planned = [Planned(c, cfg := config_of(spec, c, configure), command.state(cfg, c.folder)) for c in tuning_cells(spec)]
    chosen = choices(spec) if spec.tune is not None else {}
    for cell in main_cells(spec, chosen):
        cfg = config_of(spec, cell, configure)
        planned.append(Planned(cell, cfg, WAITING if chosen is None else command.state(cfg, cell.folder)))
    return planned


def refused(planned: Sequence[Planned]) -> StudyError | None:
    """The first cell whose folder holds another run's settings, as one line."""
    bad = [p for p in planned if p.state.startswith("refused: ")]
    if not bad:
        return None
    more = f" (and {len(bad) - 1} more cells)" if len(bad) > 1 else ""
    return StudyError(f"study: {bad[0].state.removeprefix('refused: ')}{more}")


def seconds_each(planned: Sequence[Planned], command: Command) -> tuple[float, int] | None:
    """Wall seconds a unit of work (a round, a cell) over the finished cells, and how many there were."""
    total, units, count = 0.0, 0, 0
    for p in planned:
        if p.state == "done" and (spent := command.spent(p.cell.folder)) is not None:
            total, units, count = total + spent[0], units + spent[1], count + 1
    return (total / units, count) if units else None


def time_left(planned: Sequence[Planned], command: Command, jobs: int = 1) -> str:
    """The time the unfinished cells need, estimated from the finished ones."""
    unit = command.unit
    left = sum(command.work(p.cfg, p.cell.folder, p.state) for p in planned)
    if not left:
        return "nothing left to run"
    rate = seconds_each(planned, command)
    if rate is None:
        return f"{left} {unit}s left; the time left is known once a cell has finished"
    each, count = rate
    cells = f"{count} finished cell{'s' * (count != 1)}"
    return f"{left} {unit}s left, about {duration(each * left / jobs)} at {each:.2f} s a {unit} ({cells}, {jobs} at a time)"


def status(spec: Spec, configure: Configure) -> list[str]:
    """The study's cells, then each part's: one line per cell, then the counts and the time left."""
    lines = status_of(spec, configure)
    for name, part in spec.parts.items():
        *cells, summary = status_of(part, configure)
        lines += [*cells, f"parts.{name}: {summary}"]
    return lines


def status_of(spec: Spec, configure: Configure) -> list[str]:
    """One line per cell (its folder and state), then the counts and the time left."""
    planned, command = plan(spec, configure), command_of(spec.command, configure)
    width = max(len(str(p.cell.folder)) for p in planned)
    lines = []
    for p in planned:
        said = p.state
        if said == "stopped":
            said = f"stopped at round {rounds_done(p.cell.folder)} of {p.cfg.federation.rounds} (run resumes it)"
        lines.append(f"{str(p.cell.folder):<{width}}  {said}")
    counts: dict[str, int] = {}
    for p in planned:
        key = "refused (other settings)" if p.state.startswith("refused") else p.state
        counts[key] = counts.get(key, 0) + 1
    summary = ", ".join(f"{n} {name}" for name, n in counts.items())
    return [*lines, f"{len(planned)} cells: {summary}; {time_left(planned, command)}"]


def usable_jobs(jobs: int) -> int:
    """At most one cell a core: more would only share the cores."""
    cores = len(usable_cores())
    if jobs > cores:
        print(f"--jobs {jobs}: this machine has {cores} cores; running {cores} cells at a time", flush=True)
    return min(jobs, cores)


def cpu_seconds() -> float:
    """CPU seconds this process and its finished children have taken."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def ensure_timed(spec: Spec, command: Command, p: Planned, heading: Callable[[], str]) -> None:
    """The cell ensured; one run (not reused) appends its CPU and wall seconds to the study's TIMES."""
    cpu, wall = cpu_seconds(), time.time()
    command.ensure(p.cfg, p.cell.folder, p.state, heading)
    if p.state == "done":
        return
    line = {"cell": p.cell.folder.relative_to(spec.runs).as_posix(), "cpu_s": round(cpu_seconds() - cpu, 1),
            "wall_s": round(time.time() - wall, 1)}  # fmt: skip
    append_text(spec.runs / TIMES, json.dumps(line) + "\n")  # a link planted there is refused, never followed


# `python -c` for a cell on its share of the cores: the affinity set before fedpfn's command runs
ON_CORES = ("import os, runpy; os.sched_setaffinity(0, {}); "
            "runpy.run_module('fedpfn.cli.main', run_name='__main__', alter_sys=True)")


def run_cells(spec: Spec, command: Command, todo: Sequence[Planned], jobs: int, given: Sequence[str] = ()) -> list[str]:
    """Ensure each cell: in this process one by one, or `jobs` processes at a time (each given the
    command's own flags `given`, `--trust-code`, nothing of the current folder on its path, and a
    share of the cores that its engine trains on); the failures."""
    if jobs == 1:
        for i, p in enumerate(todo, 1):
            heading = lambda p=p, i=i: f"== {p.cell.label()} ({i} of {len(todo)})"  # noqa: E731
            ensure_timed(spec, command, p, heading)
        return []

    shares: Queue[set[int]] = Queue()  # each running cell on a share of the cores (resources.core_shares)
    for share in core_shares(jobs, usable_cores()):
        shares.put(share)

    def one(p: Planned) -> str | None:
        share = shares.get()
        try:
            return cell_process(p, share)
        finally:
            shares.put(share)

    def cell_process(p: Planned, share: set[int]) -> str | None:
        cell = ("study", "run", str(spec.path), *given, "--cell", str(p.cell.folder))
        argv, env = python_child("-c", ON_CORES.format(sorted(share)), *cell)
        print(f"== {p.cell.label()}: {p.cell.folder}", flush=True)
        with ExitStack() as stack:  # its lines: in its run.log, or in the log file its command names
            if command.log is not None:
                p.cell.folder.mkdir(parents=True, exist_ok=True)
                flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW  # a link planted there: refused
                out: Any = stack.enter_context(os.fdopen(os.open(p.cell.folder / command.log, flags, 0o666), "a"))
            else:
                out = subprocess.DEVNULL
            code = children.run(argv, env=env, stdout=out, stderr=subprocess.STDOUT if command.log else None)
        return None if code in (0, None) else f"{p.cell.folder} (exit {code})"

    children = Children()
    with ThreadPoolExecutor(max_workers=jobs) as pool, stopped_with(children, spec, pool):
        return [f for f in pool.map(one, todo) if f is not None]


class Stopped(BaseException):
    """SIGINT or SIGTERM while a study's cells run in processes of their own."""


@contextmanager
def stopped_with(children: Children, spec: Spec, pool: ThreadPoolExecutor) -> Iterator[None]:
    """While the block runs, SIGINT and SIGTERM stop the cells' processes (each stops as after
    Ctrl-C, resumable) and no other starts; then one line, and exit 130 or 143. A kill -9 of this
    process stops them too: the watcher that sees it go sends them SIGTERM (fedpfn.runtime.reaper)."""

    def stop(signum: int, frame: FrameType | None) -> None:
        raise Stopped(signum)

    watcher = reaper.start_watcher(keep=reaper.descendants([os.getpid()]))  # what ran before the cells: left alone
    before = {s: signal.signal(s, stop) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    except Stopped as stopped:
        for s in before:  # a second Ctrl-C waits for the cells' stop (STOP_SECONDS at most)
            signal.signal(s, signal.SIG_IGN)
        pool.shutdown(wait=False, cancel_futures=True)
        count = children.stop()
        print(f"\nstopped: {count} running cell{'s' if count != 1 else ''} stopped with it; each goes on from where it "
              f"stopped with: fedpfn study run {spec.path}", file=sys.stderr, flush=True)  # fmt: skip
        raise SystemExit(128 + stopped.args[0]) from None
    finally:
        for s, handler in before.items():
            signal.signal(s, handler)
        reaper.stop_watcher(watcher)


def chosen_arms(spec: Spec, arms: Sequence[str]) -> set[str]:
    """The arms `--arm` names (every arm, its parts' too, when none is named); an unknown one is refused."""
    declared = [arm for study in spec.every() for arm in study.arms]
    unknown = [arm for arm in arms if arm not in declared]
    if unknown:
        raise spec.refuse(f"--arm {unknown[0]}: not an arm of the study (declared: {', '.join(declared)})")
    return set(arms or declared)


def run(spec: Spec, configure: Configure, jobs: int = 1, arms: Sequence[str] = (), given: Sequence[str] = ()) -> int:
    """Every cell (of the arms named, or all) to its end: the study's, then its parts'; 1 if a cell
    failed. Every cell goes through its command's ensure, a finished one too (it is reused, and
    says so). Runs over other arms may go on beside it. `given`: the command's flags its cells' own
    processes take too (`--trust-code`)."""
    wanted, jobs = chosen_arms(spec, arms), usable_jobs(jobs)
    for study in spec.every():  # the one check every --out passes, before any cell runs
        if (problem := folder_problem(study.runs, "runs", "a study's runs")) is not None:
            raise spec.refuse(problem)
    for study in spec.parts.values():  # a part's folder of other settings, refused before any cell runs
        if (problem := refused(plan(study, configure))) is not None:
            raise problem
    names = ["", *(f"parts.{name} " for name in spec.parts)]
    for name, study in zip(names, spec.every()):
        if run_study(study, configure, jobs, wanted, name, given):
            return 1
    return 0


def run_study(spec: Spec, configure: Configure, jobs: int, wanted: set[str], name: str = "",
              given: Sequence[str] = ()) -> int:
    """One study's (or part's) cells of the wanted arms: the tuning cells, then the main cells."""
    command = command_of(spec.command, configure)
    for tuning in (True, False):
        planned = plan(spec, configure)
        if (problem := refused(planned)) is not None:
            raise problem
        planned = [p for p in planned if p.cell.arm in wanted]
        cells = [p for p in planned if p.cell.tuning == tuning]
        if (running := [p for p in cells if p.state == "running"]):
            raise StudyError(f"study: {running[0].cell.folder} is being run by another process now; wait for it, "
                             "or stop it and run the study again")  # fmt: skip
        if not cells:
            continue
        left = [p for p in cells if p.state != "done"]
        print(f"{name}{'tuning' if tuning else 'main'}: {len(left)} of {len(cells)} cells to run; {time_left(planned, command, jobs)}",
              flush=True)  # fmt: skip
        failed = run_cells(spec, command, cells if jobs == 1 else left, jobs, given)
        if failed:
            print(f"error: {len(failed)} cells stopped: {', '.join(failed)}; run the study again to resume them",
                  file=sys.stderr)  # fmt: skip
            return 1
    return 0


def run_one_cell(spec: Spec, configure: Configure, folder: str) -> int:
    """One cell by its folder, the study's or a part's (what `--jobs` starts in a process of its own)."""
    found = [(s, p) for s in spec.every() for p in plan(s, configure) if str(p.cell.folder) == folder]
    if not found:
        raise StudyError(f"study: {spec.path} has no cell in '{folder}'")
    study, one = found[0]
    ensure_timed(study, command_of(study.command, configure), one, lambda: f"== {one.cell.label()}")
    return 0
