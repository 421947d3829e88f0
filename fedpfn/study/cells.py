"""A study's cells: one folder each, its flags as the study's command takes them, its config.

A cell is an arm at one axes point and one seed (or, where the study tunes a setting first, an
arm at one axes point and one of the tuned values). Its flags are the shared ones, then the
axes', the arm's, the tuned value and the stage's: a later flag replaces an earlier one of the
same name, so an arm may change a shared setting. `Configure` is `fedpfn run`'s own path from
flags to a checked config (fedpfn.cli passes it in: this layer sits below the command line); a
study whose cells run another command checks them as that command does (fedpfn.study.commands).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fedpfn.core.files import METRICS, is_finished, read_jsonl
from fedpfn.core.settings import ConfigError
from fedpfn.core.user_code import code_paths, code_settings
from fedpfn.study.commands import Command, Configure, RunCells
from fedpfn.study.limits import fields_problem
from fedpfn.study.places import place_problem
from fedpfn.study.spec import Spec


@dataclass(frozen=True)
class Cell:
    """One run of the study; `value` is the tuned value of a tuning cell (None for a main cell)."""

    arm: str
    seed: int
    point: tuple[tuple[str, str], ...]  # the axes point: (axis, value) pairs
    folder: Path
    flags: tuple[str, ...]
    value: str | None = None
    joint: tuple[int, ...] = ()  # the seeds the cell runs together (a JOINT command's); () for one seed

    @property
    def tuning(self) -> bool:
        return self.value is not None

    @property
    def seeds(self) -> int | tuple[int, ...]:
        """What the cell's command is given: its seed, or the seeds it runs together."""
        return self.joint or self.seed

    def label(self) -> str:
        at = " ".join(f"{axis}={value}" for axis, value in self.point)
        seeds = f"seeds {','.join(map(str, self.joint))}" if self.joint else f"seed {self.seed}"
        return " ".join(filter(None, [self.arm, at, f"{'value ' + self.value if self.tuning else seeds}"]))


def groups(flags: Sequence[str]) -> list[tuple[str, list[str]]]:
    """Flags as (name, tokens) groups: `--lr 0.1` is ('lr', ['--lr', '0.1']); `lr=0.1` is ('lr', [...])."""
    found: list[tuple[str, list[str]]] = []
    for token in flags:
        if token.startswith("--"):
            found.append((token[2:].split("=")[0].replace("-", "_").removeprefix("no_"), [token]))
        elif "=" in token and not found or "=" in token and len(found[-1][1]) > 1:
            found.append((token.split("=")[0].replace("-", "_"), [token]))
        elif found:
            found[-1][1].append(token)
        else:
            found.append(("", [token]))
    return found


def merged(*parts: Sequence[str]) -> tuple[str, ...]:
    """The parts' flags in order, a later flag replacing an earlier one of the same name."""
    chosen: dict[str, list[str]] = {}
    for part in parts:
        for name, tokens in groups(part):
            chosen.pop(name, None)
            chosen[name] = tokens
    return tuple(token for tokens in chosen.values() for token in tokens)


def points(spec: Spec) -> list[tuple[tuple[str, str], ...]]:
    """Every axes point, in the declared order (one empty point where there are no axes)."""
    return [tuple(zip(spec.axes, values)) for values in itertools.product(*spec.axes.values())]


def axis_flags(spec: Spec, point: tuple[tuple[str, str], ...]) -> list[str]:
    """The point's flags: `--axis value`, or the flags a named axis value stands for."""
    found: list[str] = []
    for axis, value in point:
        found += spec.axis_sets[axis][value] if axis in spec.axis_sets else [f"--{axis.replace('_', '-')}", value]
    return found


def folder_of(spec: Spec, pattern: str, **names: object) -> Path:
    """The cell's folder: the pattern filled in, under the study's runs folder and never outside it."""
    if (problem := fields_problem(pattern, list(names))) is not None:
        raise spec.refuse(f"the cell pattern {problem}: give {{arm}}, {{seed}}, {{value}} or an axis in braces")
    relative = pattern.format(**names)
    if (problem := place_problem(relative, "cell")) is not None:  # an arm or axis value of '..' or '/etc'
        raise spec.refuse(f"the cell pattern {pattern!r} gives {problem.removeprefix('cell = ')}")
    return spec.runs / relative


def tuning_cells(spec: Spec) -> list[Cell]:
    tune = spec.tune
    if tune is None:
        return []
    return [Cell(arm, tune.seed, point, folder_of(spec, tune.cell, arm=arm, value=value, seed=tune.seed, **dict(point)),
                 merged(spec.shared, axis_flags(spec, point), flags, [tune.flag, value], tune.flags), value)
            for point in points(spec) for arm, flags in spec.arms.items() if arm not in tune.borrow
            for value in tune.values]  # fmt: skip


def main_cells(spec: Spec, chosen: dict[tuple, str] | None = None) -> list[Cell]:
    """The main runs; with a tuned setting, its value chosen for the arm at the point (`chosen`), or
    the first value while the tuning runs are not finished (the config is then only checked). A
    joint study's cell runs all the arm's seeds (`seed` is the first)."""
    cells = []
    for point in points(spec):
        for arm, flags in spec.arms.items():
            tuned = [] if spec.tune is None else [spec.tune.flag, (chosen or {}).get((arm, point), spec.tune.values[0])]
            seeds = spec.seeds_of(arm)
            for seed in seeds[:1] if spec.joint else seeds:
                folder = folder_of(spec, spec.cell, arm=arm, seed=seed, **dict(point))
                cells.append(Cell(arm, seed, point, folder, merged(spec.shared, axis_flags(spec, point), flags, tuned),
                                  joint=seeds if spec.joint else ()))  # fmt: skip
    return cells


def flag_code(flags: Sequence[str]) -> list[str]:
    """The dotted paths that flags give a setting that may be code (fedpfn.core.user_code.CODE_SETTINGS)."""
    values = {name: (tokens[1] if len(tokens) > 1 else tokens[0].partition("=")[2]).strip("'\"")
              for name, tokens in groups(flags)}  # fmt: skip
    return [path for value in code_settings(values) for path in code_paths(value)]


def named_code(spec: Spec) -> dict[str, str]:
    """Every dotted path the study file names (its cells', its parts' and its page's evaluation
    flags), each with the first place that names it: what fedpfn.core.user_code.name_file_code takes."""
    found: dict[str, str] = {}
    for study in spec.every():
        for cell in [*tuning_cells(study), *main_cells(study)]:
            for path in flag_code(cell.flags):
                found.setdefault(path, f"study: {spec.path}: {cell.label()}")
    for path in flag_code(spec.page.evaluate if spec.page else ()):
        found.setdefault(path, f"study: {spec.path}: page.evaluate")
    return found


def command_of(name: str, configure: Configure) -> Command:
    """The command a study's cells run, by the name its file gives (fedpfn.study.spec.COMMANDS)."""
    if name == "lmc":
        from fedpfn.study.lmc_cells import LmcCells  # the analysis (torch) only where a study runs it

        return LmcCells()
    if name == "soup":
        from fedpfn.study.soup_cells import SoupCells

        return SoupCells()
    return RunCells(configure)


def config_of(spec: Spec, cell: Cell, configure: Configure) -> Any:
    """The config of the cell as the study's command checks it (`fedpfn run`'s: a RunConfig); what
    it refuses is one line naming the cell."""
    try:
        return command_of(spec.command, configure).configure(list(cell.flags), cell.seeds, cell.folder)
    except ConfigError as err:
        raise spec.refuse(f"{cell.label()}: {'; '.join(str(err).splitlines())}") from None


def score(spec: Spec, cell: Cell) -> float | None:
    """A finished tuning run's mean `metric` over its last rows; None below the floor (collapsed)."""
    assert spec.tune is not None
    rows = [r[spec.tune.metric] for r in read_jsonl(cell.folder / METRICS) if r.get(spec.tune.metric) is not None]
    if not rows:
        raise spec.refuse(f"{cell.folder} has no {spec.tune.metric}; was it run with a validation split?")
    window = rows[-spec.tune.last :]
    value = sum(window) / len(window)
    return None if value < spec.tune.floor else value


def scores(spec: Spec) -> dict[tuple, float | None] | None:
    """(arm, point, value) -> its tuning run's score; None until every tuning run is finished."""
    cells = tuning_cells(spec)
    if not all(is_finished(c.folder) for c in cells):
        return None
    return {(c.arm, c.point, c.value): score(spec, c) for c in cells}


def choices(spec: Spec) -> dict[tuple, str] | None:
    """(arm, point) -> the tuned value that scored best (the first of equals; a collapsed run
    scores 0), a borrowing arm's its lender's; None until every tuning run is finished."""
    found, tune = scores(spec), spec.tune
    if found is None or tune is None:
        return None
    best = lambda arm, point: max(tune.values, key=lambda v: found[arm, point, v] or 0.0)  # noqa: E731
    return {(arm, point): best(tune.borrow.get(arm, arm), point) for point in points(spec) for arm in spec.arms}
