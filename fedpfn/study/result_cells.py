"""Cells run by an analysis command in this process: a cell is one seed's folder holding the
command's result file (lmc.json, soup.json), whose `config` holds the settings the cell ran with.

A cell is finished when its result holds the settings its flags give, read off the command's own
parser and checks; a cell whose result holds other settings is refused in one line, never reused
or overwritten; a killed cell left no result and is run again (the figures it left replaced). A
running cell holds its folder's lock, the one a run folder takes (fedpfn.runtime.runfolder), so
`status` tells running from missing. Each cell runs one torch thread unless the study says
otherwise: the study runs cells side by side itself. A command gives its result file, its program
name, its output files, how it reads a cell's flags (`checked`) and its `main`.
"""

from __future__ import annotations

import argparse
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fedpfn.core.files import DamagedFile, read_json
from fedpfn.core.settings import ConfigError
from fedpfn.runtime.ensure import in_use
from fedpfn.runtime.runfolder import RunFolder
from fedpfn.study.commands import Heading, settings_of

DEFAULTS = ("--threads", "1")  # before the study's flags, which may replace it


def _refusing(message: str) -> None:
    raise ConfigError(message)


def parsed(parser: argparse.ArgumentParser, argv: Sequence[str]) -> dict[str, Any]:
    """The flags as the command's parser reads them, its refusal a ConfigError; without --out and --overwrite."""
    parser.exit = lambda status=0, message=None: _refusing((message or "").strip().removeprefix("error: "))  # type: ignore[method-assign,assignment]
    args = vars(parser.parse_args(list(argv)))
    args.pop("out")
    args.pop("overwrite", None)
    return args


@dataclass(frozen=True)
class ResultCell:
    """A cell's checked settings and the command line that gives them."""

    settings: Any
    argv: tuple[str, ...]


class ResultCells(ABC):
    """One seed a cell (or a joint cell's seeds), the command run in this process; a subclass names
    the command."""

    name, unit, log = "", "cell", ""
    result: str = ""  # the file whose `config` says what the cell ran with
    prog: str = ""
    outputs: tuple[str, ...] = ()  # every file the command writes (a killed cell's are replaced)
    main: Callable[[list[str], str], int]

    @abstractmethod
    def checked(self, argv: list[str]) -> Any:
        """The cell's settings from its command line; ConfigError names every problem."""

    def saved(self, config: dict[str, Any]) -> dict[str, Any]:
        """A result's settings as they compare with a cell's (an older result's defaults filled in)."""
        return config

    def argv(self, flags: list[str], seed: int | tuple[int, ...], folder: Path) -> list[str]:
        """The cell's command line: its seed (or the seeds a joint cell runs together) and folder."""
        seeds = ",".join(map(str, seed)) if isinstance(seed, tuple) else str(seed)
        return [*DEFAULTS, *flags, "--seeds", seeds, "--out", str(folder)]

    def configure(self, flags: list[str], seed: int | tuple[int, ...], folder: Path) -> ResultCell:
        argv = self.argv(flags, seed, folder)
        return ResultCell(self.checked(argv), tuple(argv))

    def state(self, cell: ResultCell, folder: Path) -> str:
        result = folder / self.result
        if not result.exists():
            return "running" if in_use(folder) else "missing"
        try:
            saved = self.saved(read_json(result)["config"])
        except (OSError, DamagedFile, KeyError, TypeError) as err:
            return f"refused: {result} cannot be read ({err}); move it away to run the cell again"
        wanted = settings_of(cell.settings)
        differing = sorted(key for key in wanted if saved.get(key) != wanted[key])
        if differing:
            return f"refused: {result} holds other settings ({', '.join(differing)}); move it away to run the cell again"
        return "done"

    def work(self, cell: ResultCell, folder: Path, state: str) -> int:
        return 0 if state == "done" else 1

    def spent(self, folder: Path) -> tuple[float, int] | None:
        try:
            return float(read_json(folder / self.result)["seconds"]), 1
        except (OSError, DamagedFile, KeyError, TypeError, ValueError):
            return None

    def ensure(self, cell: ResultCell, folder: Path, state: str, heading: Heading) -> None:
        """The cell's result: reused when finished, else the command run here, holding the folder."""
        if state == "done":
            print(f"{folder}: finished earlier with the same settings, reused", flush=True)
            return
        print(heading(), flush=True)
        left = any((folder / name).is_file() for name in self.outputs)  # what a killed cell left: replaced
        with RunFolder(folder).exclusive():
            done = self.main([*cell.argv, *(["--overwrite"] if left else [])], self.prog)
        if done != 0:
            raise ConfigError(f"{folder}: {self.prog} stopped (exit {done}); its error is above")
