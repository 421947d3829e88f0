"""Keyword arguments a user gives as a JSON object for a class fedpfn builds (a strategy, a
strategy wrapper or a client mod, Flower's or the user's; a flwr-datasets partitioner), read and
checked before that class sees them, so a bad value is one line naming it rather than a hang,
an overflow or a traceback deep inside Flower, Opacus or flwr-datasets.

- The object nests at most MAX_DEPTH levels (a list of lists is an argument; 100 levels deep
  is none) and holds no integer too long for Python to convert (one line, not a ValueError).
- Every number in it, at any depth, is finite and within MAX_MAGNITUDE, and a nonzero one is at
  least MIN_MAGNITUDE in size: a NaN or infinite noise multiplier hung the round until stopped,
  1e308 overflowed the privacy accountant and 1e-300 divided by zero in it; a NaN clipping
  norm or LocalDpMod epsilon ran.
- Where the class annotates a parameter as a number (int, float, either or None), a value of
  another type is refused: `true` is no noise multiplier (Python would take it for 1), and a
  fraction is no whole number.
"""

from __future__ import annotations

import inspect
import json
import math
import types
import typing
from typing import Any

from fedpfn.core.files import DamagedFile, nesting_depth, parse_json
from fedpfn.core.settings import ConfigError
from partitions.dirichlet import PartitionError
from partitions.flwr import flwr_problem, partitioner_class

MAX_DEPTH = 8  # the object itself is 1; DirichletPartitioner's alpha list is 2
MAX_MAGNITUDE = 1e12  # far beyond any noise multiplier, clipping norm or count; far below float overflow
MIN_MAGNITUDE = 1e-12  # 1e-12 noise costs ε of about 1e24, still a number; 1e-300 divides by zero
NUMBERS = (int, float)


def parse_kwargs(text: str | None, setting: str) -> dict[str, Any]:
    """`setting`'s JSON object of keyword arguments ('' or None: none), its numbers checked; ConfigError in one line."""
    if text is None or not text.strip():
        return {}
    shown = f"'{text[:40]}{'...' if len(text) > 40 else ''}'"
    if nesting_depth(text) > MAX_DEPTH:
        raise ConfigError(
            f"{setting}: {shown} nests deeper than {MAX_DEPTH} levels; give a JSON object of plain values"
        )
    try:
        kwargs = parse_json(text, shown)
    except DamagedFile as err:
        raise ConfigError(f"{setting}: {err}") from None
    if not isinstance(kwargs, dict):
        raise ConfigError(
            f"{setting}: {shown} is not a JSON object; give keyword arguments as one, e.g. '{{\"beta\": 0.2}}'"
        )
    for name, value in kwargs.items():
        if (problem := number_problem(value)) is not None:
            raise ConfigError(f"{setting}: {name} {problem}")
    return kwargs


def partition_args_problem(method: str, text: str) -> str | None:
    """Why `--partition flwr:NAME --partition-args JSON` cannot run, one line, or None: the arguments
    read and checked here, then against the partitioner's signature (partitions.flwr)."""
    try:
        check_kinds(partitioner_class(method), parse_kwargs(text, "partition_args"), "partition_args")
    except (ConfigError, PartitionError) as err:
        return str(err)
    return flwr_problem(method, text)


def number_problem(value: Any) -> str | None:
    """Why a number in `value` (at any depth) cannot be given to a class, or None."""
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, list):
        return next((p for p in map(number_problem, value) if p is not None), None)
    if isinstance(value, bool) or not isinstance(value, NUMBERS):
        return None
    if isinstance(value, float) and not math.isfinite(value):
        return f"is {_json(value)}; give a finite number"
    if abs(value) > MAX_MAGNITUDE or 0 < abs(value) < MIN_MAGNITUDE:
        return f"is {_json(value)}; give a number from {MIN_MAGNITUDE:g} to {MAX_MAGNITUDE:g} in size (or 0)"
    return None


def check_kinds(target: type, kwargs: dict[str, Any], setting: str) -> None:
    """ConfigError (one line) for the first value of another type than `target`'s constructor
    annotates a number parameter with (its own `__init__`, then its bases', as `**kwargs` pass them on)."""
    for name, value in kwargs.items():
        kinds = number_kinds(_annotation(target, name))
        if kinds is None or (value is None and types.NoneType in kinds):
            continue
        wanted = "a whole number" if float not in kinds else "a number"
        if isinstance(value, bool) or not isinstance(value, NUMBERS):
            raise ConfigError(f"{setting}: {name} is {_json(value)}; {target.__name__} takes {wanted} there")
        if isinstance(value, float) and float not in kinds and not value.is_integer():
            raise ConfigError(f"{setting}: {name} is {_json(value)}; {target.__name__} takes {wanted} there")


def number_kinds(annotation: Any) -> set[type] | None:
    """The types an annotation allows where it allows numbers only (int, float, None), else None."""
    union = typing.get_origin(annotation) in (typing.Union, types.UnionType)
    kinds = [types.NoneType if a is None else a for a in (typing.get_args(annotation) if union else (annotation,))]
    numeric = all(any(a is t for t in (int, float, types.NoneType)) for a in kinds)  # `is`: no annotation's __eq__
    return set(kinds) if numeric and (int in kinds or float in kinds) else None


def _annotation(target: type, name: str) -> Any:
    """The annotation of `target(name=...)`'s parameter, looked up the class's bases too; empty if unknown."""
    for klass in target.__mro__ if inspect.isclass(target) else ():
        if "__init__" not in vars(klass):
            continue
        try:
            parameters = inspect.signature(klass.__init__, eval_str=True).parameters
        except (NameError, TypeError, ValueError, SyntaxError):  # an annotation that names what is not there
            return inspect.Parameter.empty
        if name in parameters:
            return parameters[name].annotation
    return inspect.Parameter.empty


def _json(value: Any) -> str:
    """A value as the user typed it (true, "1.0"), not as Python prints it."""
    return json.dumps(value)[:40]
