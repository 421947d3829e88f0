"""How large a study file may make a study, and what its stored results must hold: checked before
any cell is built, configured or read, so a file of a million cells or a stored file of the wrong
shape is one line naming the key, at once, never a hang, a MemoryError or a traceback.

The bounds are far above the project's own studies (the largest: 108 cells, stored
results of 0.4 MB): MAX_DEPTH levels of tables and arrays, MAX_SEEDS seeds, MAX_CELLS cells in
all (the study's and its parts', tuning cells too), counted from the declaration before any is
built. Stored results (fedpfn.study.page's own reading) are a `cells` list of objects, each with
the keys the page reads, of the kinds it reads them as.
"""

from __future__ import annotations

import math
import re
from collections.abc import Collection
from numbers import Real
from string import Formatter
from typing import Any, Protocol


class Spec(Protocol):
    """What the bounds read of a study (fedpfn.study.spec.Spec, which imports this module)."""

    @property
    def axes(self) -> dict[str, tuple[str, ...]]: ...
    @property
    def arms(self) -> dict[str, tuple[str, ...]]: ...
    @property
    def endpoints(self) -> dict[str, Any]: ...
    @property
    def tune(self) -> Any: ...
    @property
    def joint(self) -> bool: ...
    def seeds_of(self, arm: str) -> tuple[int, ...]: ...
    def every(self) -> list[Any]: ...

MAX_DEPTH = 8  # tables and arrays within each other in a study file (the project's need 4)
MAX_SEEDS = 1000  # seeds of one study or arm
MAX_CELLS = 5000  # cells of a study, its parts' and tuning cells included
MAX_SHOWN = 60  # characters of a value a message quotes
FORMAT_SPEC = re.compile(r"(.?[<>=^])?[-+ ]?z?#?0?\d{0,2}[,_]?(\.\d{1,2})?[a-zA-Z%]?")  # a number's, bounded


def shown(value: Any) -> str:
    """`value` as a message quotes it: its repr, cut to MAX_SHOWN characters."""
    text = repr(value)
    return text if len(text) <= MAX_SHOWN else text[: MAX_SHOWN - 5] + " ...]"


def fields_problem(pattern: str, known: Collection[str]) -> str | None:
    """Why a format string from a file cannot be filled with `known` names alone, or None: a brace
    that does not pair; a field that is more than a name (`{arm:>999999999}` would fill the memory,
    `{x.__class__}` reads Python's insides, `{0}` names nothing); a name not among `known`."""
    try:
        fields = [(name, spec, conversion) for _, name, spec, conversion in Formatter().parse(pattern) if name is not None]
    except ValueError as err:
        return f"{shown(pattern)} cannot be filled ({err})"
    for name, spec, conversion in fields:
        if not name.isidentifier() or spec or conversion:
            field = "{" + name + ("!" + conversion if conversion else "") + (":" + spec if spec else "") + "}"
            return f"{shown(pattern)} holds {field}, more than a name in braces"
        if name not in known:
            return f"{shown(pattern)} names {{{name}}}, which is not filled (names: {', '.join(known)})"
    return None


def too_deep(data: Any, limit: int = MAX_DEPTH) -> str | None:
    """The key of the first value nested more than `limit` levels deep, or None (no recursion)."""
    todo: list[tuple[Any, str, int]] = [(data, "", 0)]
    while todo:
        value, key, depth = todo.pop()
        if depth > limit:
            return key or "the file"
        items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
        todo += [(v, f"{key}.{k}" if isinstance(k, str) else f"{key}[{k}]", depth + 1) for k, v in items]
    return None


def cell_count(spec: Spec) -> int:
    """The cells the study declares (its own, not its parts'), counted without building one."""
    points = math.prod(len(values) for values in spec.axes.values())
    runs = sum(1 if spec.joint else len(spec.seeds_of(arm)) for arm in spec.arms)
    tuning = len(spec.arms) * len(spec.tune.values) if spec.tune is not None else 0
    return points * (runs + tuning)


def size_problem(spec: Spec) -> str | None:
    """Why the study (with its parts) is too large to plan, or None."""
    count = sum(cell_count(study) for study in spec.every())
    if count > MAX_CELLS:
        return (f"declares {count:,} cells (arms x seeds x axes points, with its parts and tuning runs); a study "
                f"holds at most {MAX_CELLS:,}: split it into studies of fewer cells")  # fmt: skip
    return None


STORED_CELL = {"arm": str, "point": dict, "seed": int, "folder": str, "command": str, "endpoints": dict}


def stored_problem(spec: Spec, data: dict[str, Any]) -> str | None:
    """Why stored results cannot be what the page's tables read (a `cells` list of cells of the
    study's arms, each with STORED_CELL's keys and a number or null for each endpoint), or None."""
    cells = data.get("cells")
    if not isinstance(cells, list):
        return f"has no list 'cells' (found {shown(cells)})"
    for n, cell in enumerate(cells):
        if not isinstance(cell, dict):
            return f"cells[{n}] is {shown(cell)}, not an object"
        wrong = [key for key, kind in STORED_CELL.items() if not isinstance(cell.get(key), kind)
                 or isinstance(cell.get(key), bool)]  # fmt: skip
        if wrong:
            return f"cells[{n}].{wrong[0]} is {shown(cell.get(wrong[0]))}, not {STORED_CELL[wrong[0]].__name__}"
        if cell["arm"] not in spec.arms:
            return f"cells[{n}].arm {shown(cell['arm'])} is not an arm of the study (declared: {', '.join(spec.arms)})"
        ends = cell["endpoints"]
        bad = [e for e in spec.endpoints if not (ends.get(e) is None or isinstance(ends.get(e), Real))
               or isinstance(ends.get(e), bool) or e not in ends]  # fmt: skip
        if bad:
            return f"cells[{n}].endpoints.{bad[0]} is {shown(ends.get(bad[0]))}, not a number or null"
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in cell["point"].items()):
            return f"cells[{n}].point is {shown(cell['point'])}, not axis names with their values as text"
    return None
