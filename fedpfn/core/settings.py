"""Declared settings: a default, a one-line help and a check, beside the code that uses them.

`RunConfig`, every algorithm's hyperparameters and the LMC analysis are dataclasses whose
fields are declared with `setting(...)`. Parsing (command line, TOML, Flower's run config,
JSON), help texts and checks are derived from the declarations, so a setting has one name,
one default and one rule, and every problem of a configuration is reported at once, one
line each, as `name: what is wrong`.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import tomllib
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

Check = Callable[[Any], "str | None"]  # the reason a value is refused, or None


class ConfigError(ValueError):
    """Settings that cannot run; the message holds one problem per line."""


# What a setting is about, declared with it; everything that sorts settings reads this.
#   (none)      what a run computes: arms of a comparison differ in these
#   federation  the setting every arm of a comparison shares (data, clients, rounds, evaluation)
#   placement   where and how it computes, never what: a resume may move it (Ray, engine, devices)
#   tracking    where its numbers are also logged: a resume may switch it
#   bookkeeping the run's folder and reporting: not part of what it computes
KINDS = ("", "federation", "placement", "tracking", "bookkeeping")


def setting(default: Any, help: str, check: Check | None = None, kind: str = "") -> Any:
    """Declare a dataclass field with its help line, its check and its kind (KINDS)."""
    if kind not in KINDS:
        raise ValueError(f"kind '{kind}' is not one of {KINDS}")
    return dataclasses.field(default=default, metadata={"help": help, "check": check, "kind": kind})


def of_kind(cls: type, kind: str) -> tuple[str, ...]:
    """The names of `cls`'s settings declared with `kind`."""
    return tuple(f.name for f in dataclasses.fields(cls) if f.metadata.get("kind", "") == kind)


# --- checks: each returns why a value is refused -------------------------------------------


def above(low: float) -> Check:
    return lambda v: None if v > low else f"{v} must be > {low}"


def at_least(low: float) -> Check:
    return lambda v: None if v >= low else f"{v} must be at least {low}"


def between(low: float, high: float, *, high_open: bool = False, low_open: bool = False) -> Check:
    """`v` in the interval, written as [low, high) etc. in the message."""

    def check(v: Any) -> str | None:
        ok_low = v > low if low_open else v >= low
        ok_high = v < high if high_open else v <= high
        if ok_low and ok_high:
            return None
        return f"{v} must be in {'(' if low_open else '['}{low}, {high}{')' if high_open else ']'}"

    return check


def one_of(choices: Iterable[str]) -> Check:
    names = tuple(choices)
    return lambda v: None if v in names else f"unknown '{v}'; use one of {', '.join(names)}"


def each(check: Check) -> Check:
    """Apply `check` to every item of a tuple setting; the first refusal is reported."""

    def check_all(values: Any) -> str | None:
        if not values:
            return "must not be empty"
        return next((msg for msg in map(check, values) if msg is not None), None)

    return check_all


# --- parsing -----------------------------------------------------------------------------


def _kind(f: dataclasses.Field) -> tuple[str, bool, bool]:
    """(scalar type name, optional, tuple) of a field annotated as a string."""
    text = str(f.type).replace(" ", "")
    optional = "|None" in text
    text = text.replace("|None", "")
    if text.startswith("tuple["):
        return text[len("tuple[") :].split(",")[0], optional, True
    return text, optional, False


def _scalar(kind: str, value: Any) -> Any:
    if kind == "bool":
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "false", "1", "0", "yes", "no"):
            return value.lower() in ("true", "1", "yes")
        raise ValueError
    if kind == "int":
        if isinstance(value, bool) or isinstance(value, float) and not value.is_integer():
            raise ValueError
        if not isinstance(value, int | float | str):
            raise ValueError
        return int(value)
    if kind == "float":
        if isinstance(value, bool) or not isinstance(value, int | float | str):
            raise ValueError
        number = float(value)
        if not math.isfinite(number):
            raise ValueError
        return number
    if not isinstance(value, str):
        raise ValueError
    return value


def coerce(f: dataclasses.Field, value: Any) -> Any:
    """A loosely typed value (text, TOML, Flower run config, JSON) as the field's type."""
    kind, optional, is_tuple = _kind(f)
    if value is None or (optional and value == ""):
        if optional:
            return None
        raise ConfigError(f"{f.name}: a value is required")
    try:
        if is_tuple:
            items = value.split(",") if isinstance(value, str) else value
            if not isinstance(items, list | tuple):
                raise ValueError
            return tuple(_scalar(kind, item.strip() if isinstance(item, str) else item) for item in items)
        return _scalar(kind, value)
    except (TypeError, ValueError, OverflowError):
        what = {"int": "an integer", "float": "a finite number", "bool": "true or false"}.get(kind, "text")
        shown = value if isinstance(value, str) else repr(value)
        raise ConfigError(f"{f.name}: '{shown}' is not {'a list of ' if is_tuple else ''}{what}") from None


def field_map(cls: type) -> dict[str, dataclasses.Field]:
    return {f.name: f for f in dataclasses.fields(cls)}


def parse_values(fields: Mapping[str, dataclasses.Field], values: Mapping[str, Any]) -> dict[str, Any]:
    """Coerce `values` (keys with '-' or '_') to the fields' types; every problem at once."""
    parsed, problems = parse_leniently(fields, values)
    if problems:
        raise ConfigError("\n".join(problems))
    return parsed


def parse_leniently(
    fields: Mapping[str, dataclasses.Field], values: Mapping[str, Any]
) -> tuple[dict[str, Any], list[str]]:
    """(the values that parse, one line per value that does not or key that is unknown)."""
    parsed: dict[str, Any] = {}
    problems: list[str] = []
    unknown = []
    for raw_key, value in values.items():
        key = str(raw_key).replace("-", "_")
        if key not in fields:
            unknown.append(str(raw_key))
            continue
        try:
            parsed[key] = coerce(fields[key], value)
        except ConfigError as err:
            problems.append(str(err))
    if unknown:
        problems.append(f"unknown setting(s) {', '.join(sorted(unknown))}; run with --help for the known ones")
    return parsed, problems


def _has_no_default(f: dataclasses.Field) -> bool:
    return f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING


def problems(obj: Any) -> list[str]:
    """Every declared check that `obj`'s values fail, as `name: reason` lines."""
    out = []
    for f in dataclasses.fields(obj):
        check = f.metadata.get("check")
        value = getattr(obj, f.name)
        if check is None or value is None:
            continue
        reason = check(value)
        if reason is not None:
            out.append(f"{f.name}: {reason}")
    return out


def read_toml(path: str | Path, table: str = "run") -> dict[str, Any]:
    """A preset's settings: top-level keys, or all of them in one `[table]`."""
    path = Path(path)
    if path.is_dir():
        raise ConfigError(f"config: '{path}' is a directory; give a TOML file")
    try:
        data = tomllib.loads(path.read_bytes().decode("utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"config: file '{path}' does not exist") from None
    except UnicodeDecodeError:
        raise ConfigError(f"config: '{path}' is not UTF-8 text") from None
    except OSError as err:
        raise ConfigError(f"config: cannot read '{path}' ({err.strerror})") from None
    except tomllib.TOMLDecodeError as err:
        raise ConfigError(f"config: '{path}' is not valid TOML ({err})") from None
    except RecursionError:
        raise ConfigError(f"config: '{path}' is nested too deeply to be a preset") from None
    if table not in data:
        return data
    others = sorted(k for k in data if k != table)
    if not isinstance(data[table], dict):
        raise ConfigError(f"config: '{table}' in '{path}' must be a table ([{table}]), not a value")
    if others:
        raise ConfigError(
            f"config: '{path}' has a [{table}] table and top-level keys ({', '.join(others)}); "
            f"put every setting in [{table}] or none"
        )
    return dict(data[table])


# --- command line ------------------------------------------------------------------------


def shown_default(value: Any) -> str:
    if isinstance(value, tuple):
        return ",".join(str(v) for v in value)
    if isinstance(value, bool):
        return "on" if value else "off"
    return "none" if value is None else str(value)


def add_flags(parser: argparse.ArgumentParser, cls: type, skip: Iterable[str] = ()) -> None:
    """One flag per field: `--name-with-dashes`, its help and its default, shown once."""
    for f in dataclasses.fields(cls):
        if f.name in skip:
            continue
        flag = "--" + f.name.replace("_", "-")
        help_text = f.metadata.get("help", "")
        kind, _, is_tuple = _kind(f)
        if _has_no_default(f):
            help_text += " (required)"
        elif "default" not in help_text:
            help_text += f" (default: {shown_default(f.default)})"
        help_text = help_text.replace("%", "%%")
        if kind == "bool" and not is_tuple:
            parser.add_argument(flag, action=argparse.BooleanOptionalAction, help=help_text)
        else:
            plural = is_tuple and not f.name.endswith("s")  # --seeds SEEDS, --anchor-ratio ANCHOR_RATIOS
            metavar = f.name.upper() + ("S" if plural else "")
            parser.add_argument(flag, metavar=metavar, help=help_text, required=_has_no_default(f))
