"""What a study's cells run: the seam between the study (plan, status, run) and one command.

A study declares `command = "run"` (the default: `fedpfn run`, a cell is a run folder),
`command = "lmc"` or `command = "soup"` (`python -m fedpfn.experiments.lmc` or `.soup`, a cell is a
folder holding lmc.json or soup.json). Each command says, for a cell's flags, seed and folder:
its checked config (`configure`, refused in one line; a run's start file, where it has one,
loaded into its model, so a start no cell could use is refused before any cell runs), its state
(done, missing, stopped, running, or `refused: ...` when the folder holds other settings), how
much work is left and how long finished cells took, and how it is run (`ensure`: reused when
finished, resumed or started otherwise). The runner holds no command's logic; `fedpfn run`'s is
fedpfn.runtime.ensure, the one primitive `fedpfn compare` uses too; `lmc`'s is
fedpfn.study.lmc_cells, `soup`'s fedpfn.study.soup_cells (both fedpfn.study.result_cells).
fedpfn.study.cells.command_of picks one by name.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from fedpfn.core.files import METRICS, SUMMARY, DamagedFile, read_json, read_jsonl
from fedpfn.core.settings import ConfigError

if TYPE_CHECKING:  # torch and the runtime: imported where a cell is configured or run, not to read a study
    from fedpfn.core.config import RunConfig

Configure = Callable[[list[str]], "RunConfig"]  # `fedpfn run`'s flags to a checked config (fedpfn.cli's)
Heading = Callable[[], str]


class Command(Protocol):
    """What the runner asks of the command a study's cells run."""

    name: str
    unit: str  # what `work` counts: "round", "cell"
    log: str | None  # the file a cell run in its own process writes its lines to (None: it keeps its own log)

    def configure(self, flags: list[str], seed: int | tuple[int, ...], folder: Path) -> Any: ...  # a tuple: JOINT's
    def state(self, cfg: Any, folder: Path) -> str: ...
    def work(self, cfg: Any, folder: Path, state: str) -> int: ...
    def spent(self, folder: Path) -> tuple[float, int] | None: ...
    def ensure(self, cfg: Any, folder: Path, state: str, heading: Heading) -> None: ...


def rounds_done(folder: Path) -> int:
    """The rounds a run folder's metrics hold (a stopped run's progress)."""
    try:
        return len(read_jsonl(folder / METRICS))
    except (OSError, DamagedFile):
        return 0


class RunCells:
    """`fedpfn run`: a cell is a run folder; reused, resumed or started by fedpfn.runtime.ensure."""

    name, unit, log = "run", "round", None

    def __init__(self, configure: Configure) -> None:
        self._configure = configure

    def configure(self, flags: list[str], seed: int, folder: Path) -> RunConfig:
        from fedpfn.core.cache import initial_model
        from fedpfn.core.data import DataError
        from fedpfn.core.groups import Start

        cfg = self._configure([*flags, "--seed", str(seed), "--out", str(folder)])
        if isinstance(cfg.start, Start):  # a start file no cell could start from: refused before any cell runs
            try:
                initial_model(cfg)
            except (DataError, ValueError) as err:
                raise ConfigError(str(err)) from None
        return cfg

    def state(self, cfg: RunConfig, folder: Path) -> str:
        from fedpfn.runtime.ensure import in_use, run_action

        try:
            action = run_action(cfg)
        except ConfigError as err:
            return f"refused: {err}"
        if action == "reuse":
            return "done"
        if action == "start":
            return "missing"
        return "running" if in_use(folder) else "stopped"

    def work(self, cfg: RunConfig, folder: Path, state: str) -> int:
        return 0 if state == "done" else cfg.federation.rounds - (rounds_done(folder) if state in ("stopped", "running") else 0)

    def spent(self, folder: Path) -> tuple[float, int] | None:
        try:
            summary = read_json(folder / SUMMARY)
            return float(summary["wall_seconds"]), int(summary["rounds"])
        except (OSError, DamagedFile, KeyError, TypeError, ValueError):
            return None

    def ensure(self, cfg: RunConfig, folder: Path, state: str, heading: Heading) -> None:
        from fedpfn.runtime.ensure import ensure_run

        ensure_run(cfg, "reuse" if state == "done" else None, heading=lambda _cfg, _action: heading())


def settings_of(cfg: Any) -> dict[str, Any]:
    """A dataclass config as its result file stores it (tuples as lists)."""
    return json.loads(json.dumps(asdict(cfg)))
