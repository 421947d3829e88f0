"""A study's cells run by `python -m fedpfn.analysis.lmc`: a cell is a folder holding lmc.json.

A cell is finished when its lmc.json holds the settings its flags give, read off the command's
own parser and checks (a cell written before the anchors' scope settings counts as their
defaults: fedpfn.core.anchors.scope_filled); a cell whose lmc.json holds other settings is
refused in one line, never reused or overwritten; a killed cell left no lmc.json and is run
again (its figure, if it left one, replaced). A running cell holds its folder's lock, the one a
run folder takes (fedpfn.runtime.runfolder), so `status` tells running from missing. Each cell
runs one torch thread unless the study says otherwise: the study runs cells side by side itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from fedpfn.analysis import lmc
from fedpfn.analysis.lmc_render import OUTPUT_FILES
from fedpfn.core.anchors import scope_filled
from fedpfn.core.files import DamagedFile, read_json
from fedpfn.core.settings import ConfigError
from fedpfn.runtime.ensure import in_use
from fedpfn.runtime.runfolder import RunFolder
from fedpfn.study.commands import Heading, settings_of

RESULT = "lmc.json"
PROG = "python -m fedpfn.analysis.lmc"
DEFAULTS = ("--threads", "1")  # before the study's flags, which may replace it


def _refusing(message: str) -> None:
    raise ConfigError(message)


@dataclass(frozen=True)
class LmcCell:
    """A cell's checked settings and the command line that gives them."""

    settings: lmc.LmcConfig
    argv: tuple[str, ...]


class LmcCells:
    """`python -m fedpfn.analysis.lmc`, one seed a cell (or, in a joint study, the arm's seeds
    together), run in this process."""

    name, unit, log = "lmc", "cell", "lmc.log"

    def argv(self, flags: list[str], seed: int | tuple[int, ...], folder: Path) -> list[str]:
        """The cell's command line: its seed (or the seeds a joint cell runs together) and folder."""
        seeds = ",".join(map(str, seed)) if isinstance(seed, tuple) else str(seed)
        return [*DEFAULTS, *flags, "--seeds", seeds, "--out", str(folder)]

    def configure(self, flags: list[str], seed: int | tuple[int, ...], folder: Path) -> LmcCell:
        """The cell's settings as the command reads and checks them; ConfigError names every problem."""
        parser = lmc.build_parser(PROG)
        parser.exit = lambda status=0, message=None: _refusing((message or "").strip().removeprefix("error: "))  # type: ignore[method-assign,assignment]
        argv = self.argv(flags, seed, folder)
        args = vars(parser.parse_args(argv))
        args.pop("out")
        args.pop("overwrite", None)
        cfg, found = lmc.read_config(args)
        found += lmc.unused_problems(cfg, set(args))
        found += lmc.relation_problems(cfg) if not found else []
        if found:
            raise ConfigError("\n".join(found))
        return LmcCell(cfg, tuple(argv))

    def state(self, cell: LmcCell, folder: Path) -> str:
        result = folder / RESULT
        if not result.exists():
            return "running" if in_use(folder) else "missing"
        try:
            saved = read_json(result)["config"]
            saved = scope_filled(saved, lmc.LmcConfig)  # a cell from before the scope settings: their defaults
        except (OSError, DamagedFile, KeyError, TypeError) as err:
            return f"refused: {result} cannot be read ({err}); move it away to run the cell again"
        wanted = settings_of(cell.settings)
        differing = sorted(key for key in wanted if saved.get(key) != wanted[key])
        if differing:
            return f"refused: {result} holds other settings ({', '.join(differing)}); move it away to run the cell again"
        return "done"

    def work(self, cell: LmcCell, folder: Path, state: str) -> int:
        return 0 if state == "done" else 1

    def spent(self, folder: Path) -> tuple[float, int] | None:
        try:
            return float(read_json(folder / RESULT)["seconds"]), 1
        except (OSError, DamagedFile, KeyError, TypeError, ValueError):
            return None

    def ensure(self, cell: LmcCell, folder: Path, state: str, heading: Heading) -> None:
        """The cell's lmc.json: reused when finished, else the command run here, holding the folder."""
        if state == "done":
            print(f"{folder}: finished earlier with the same settings, reused", flush=True)
            return
        print(heading(), flush=True)
        left = any((folder / name).is_file() for name in OUTPUT_FILES)  # what a killed cell left: replaced
        with RunFolder(folder).exclusive():
            done = lmc.main([*cell.argv, *(["--overwrite"] if left else [])], PROG)
        if done != 0:
            raise ConfigError(f"{folder}: {PROG} stopped (exit {done}); its error is above")
