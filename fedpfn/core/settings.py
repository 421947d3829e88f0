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
import os
import re
import stat
import tomllib
from collections.abc import Callable, Collection, Iterable, Mapping
from pathlib import Path
from typing import Any


Check = Callable[[Any], "str | None"]  # the reason a value is refused, or None


class ConfigError(ValueError):
    """Settings that cannot run; the message holds one problem per line."""

    exit_code = 2  # bad input (fedpfn.core.user_code.UserInterrupt, a user's Ctrl-C of its own, is 130)


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
    """(scalar type name, optional, tuple) of a field, annotated as a string or (a user's) as a type."""
    text = (f.type.__name__ if isinstance(f.type, type) else str(f.type)).replace(" ", "")
    optional = "|None" in text
    text = text.replace("|None", "")
    if text.startswith("tuple["):
        return text[len("tuple[") :].split(",")[0], optional, True
    return text, optional, False


class PresetText(str):
    """A string as a preset file wrote it (quoted): text, never a number or a switch.

    A command line gives every value as text, so "5" must read as 5 there; in a TOML preset
    `rounds = "5"` is text the author quoted, and taking it as a number would hide a typo
    such as `lr = "0.1 "`. read_toml marks its strings so, and the mark survives the merge
    with the flags.
    """


_INT_TEXT = re.compile(r"[+-]?[0-9]+")
_FLOAT_TEXT = re.compile(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?")
INT_LIMIT = 2**63 - 1  # what every consumer (numpy, torch, Ray, JSON readers) can hold


def _number_text(value: str, pattern: re.Pattern[str]) -> str:
    """ASCII digits only (int("٣") would read 3), no underscores (int("1_0") would read 10)."""
    text = value.strip()
    if isinstance(value, PresetText) or not pattern.fullmatch(text):
        raise ValueError
    return text


def _int(value: Any) -> int:
    """An int from text of ASCII digits, an int, or a whole float; at most INT_LIMIT in size."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise TypeError
    if isinstance(value, float) and not value.is_integer():
        raise ValueError
    number = int(_number_text(value, _INT_TEXT) if isinstance(value, str) else value)
    if abs(number) > INT_LIMIT:
        raise OverflowError
    return number


def _float(value: Any) -> float:
    """A finite float from text in ASCII, an int or a float."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise TypeError
    number = float(_number_text(value, _FLOAT_TEXT) if isinstance(value, str) else value)
    if not math.isfinite(number):
        raise ValueError
    return number


def _bool(value: Any) -> bool:
    """A bool, or (not from a preset) text such as true/no/1."""
    if isinstance(value, bool):
        return value
    text = value.strip().lower() if isinstance(value, str) and not isinstance(value, PresetText) else None
    if text not in ("true", "false", "1", "0", "yes", "no"):
        raise ValueError
    return text in ("true", "1", "yes")


def _scalar(kind: str, value: Any) -> Any:
    if kind == "bool":
        return _bool(value)
    if kind == "int":
        return _int(value)
    if kind == "float":
        return _float(value)
    if not isinstance(value, str):
        raise TypeError
    return str(value)


def coerce(f: dataclasses.Field, value: Any) -> Any:
    """A loosely typed value (text, TOML, Flower run config, JSON) as the field's type."""
    kind, optional, is_tuple = _kind(f)
    if value is None or (optional and value == ""):
        if optional:
            return None
        raise ConfigError(f"{f.name}: a value is required")
    try:
        if is_tuple:
            if isinstance(value, PresetText) and kind != "str":
                raise ValueError  # a preset gives a list as a TOML array
            items = value.split(",") if isinstance(value, str) else value
            if not isinstance(items, list | tuple):
                raise TypeError
            return tuple(_scalar(kind, item.strip() if isinstance(item, str) else item) for item in items)
        return _scalar(kind, value)
    except OverflowError:
        raise ConfigError(f"{f.name}: {value} is out of range (at most {INT_LIMIT} in size)") from None
    except (TypeError, ValueError):
        raise ConfigError(_type_problem(f.name, kind, is_tuple, value)) from None


def _type_problem(name: str, kind: str, is_tuple: bool, value: Any) -> str:
    what = {"int": "an integer", "float": "a finite number", "bool": "true or false"}.get(kind, "text")
    shown = value if isinstance(value, str) else repr(value)
    line = f"{name}: '{shown}' is not {'a list of ' if is_tuple else ''}{what}"
    if isinstance(value, PresetText) and kind != "str":
        unquoted = f"[{value}]" if is_tuple else value
        line += f" (the preset quotes it: write {name} = {unquoted} without quotes)"
    return line


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


def is_set(name: str, value: Any, default: Any, given: Collection[str] | None) -> bool:
    """Whether the user set a setting: named it on the command line or in a preset (`given`);
    where that is not known (Flower's run config holds every setting), its value is not its default."""
    return name in given if given is not None else value != default


def one_per_setting(lines: list[str]) -> list[str]:
    """The first line about each setting: a second (`optimizer: unknown 'lbfgs'`, then that its
    rule is defined for sgd and adam only) follows from the first."""
    seen: set[str] = set()
    kept = []
    for line in lines:
        name = line.split(":")[0]
        if name not in seen:
            kept.append(line)
        seen.add(name)
    return kept


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


MAX_PRESET_BYTES = 1 << 20  # a preset is a page of settings, never megabytes


def _preset_text(path: Path) -> str:
    """The text of a preset: a regular file (not a FIFO or /dev/zero), at most MAX_PRESET_BYTES, UTF-8."""
    if path.is_dir():
        raise ConfigError(f"config: '{path}' is a directory; give a TOML file")
    try:
        with open(path, "rb", buffering=0, opener=lambda p, flags: os.open(p, flags | os.O_NONBLOCK)) as fh:
            if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
                raise ConfigError(f"config: '{path}' is not a regular file; give a TOML file")
            data = fh.read(MAX_PRESET_BYTES + 1)
    except FileNotFoundError:
        raise ConfigError(f"config: file '{path}' does not exist") from None
    except OSError as err:
        raise ConfigError(f"config: cannot read '{path}' ({err.strerror})") from None
    if len(data) > MAX_PRESET_BYTES:
        raise ConfigError(
            f"config: '{path}' is larger than {MAX_PRESET_BYTES} bytes; a preset is a page of settings"
        )
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise ConfigError(f"config: '{path}' is not UTF-8 text") from None


def _marked(value: Any) -> Any:
    """TOML strings as PresetText, inside lists too."""
    if isinstance(value, str):
        return PresetText(value)
    if isinstance(value, list):
        return [_marked(v) for v in value]
    return value


def _one_spelling(data: dict[str, Any], path: Path) -> dict[str, Any]:
    """Keys with underscores; a setting written twice (`num-clients` and `num_clients`) is refused."""
    settings: dict[str, Any] = {}
    spelled: dict[str, str] = {}
    for key, value in data.items():
        name = key.replace("-", "_")
        if name in spelled:
            raise ConfigError(
                f"config: '{path}' sets {name} twice ('{spelled[name]}' and '{key}'); keep one of them"
            )
        spelled[name] = key
        settings[name] = _marked(value)
    return settings


def read_toml(path: str | Path, table: str = "run") -> dict[str, Any]:
    """A preset's settings: top-level keys, or all of them in one `[table]`; keys with underscores."""
    path = Path(path)
    text = _preset_text(path)
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise ConfigError(f"config: '{path}' is not valid TOML ({err})") from None
    except RecursionError:
        raise ConfigError(f"config: '{path}' is nested too deeply to be a preset") from None
    if table not in data:
        return _one_spelling(data, path)
    others = sorted(k for k in data if k != table)
    if not isinstance(data[table], dict):
        raise ConfigError(f"config: '{table}' in '{path}' must be a table ([{table}]), not a value")
    if others:
        raise ConfigError(
            f"config: '{path}' has a [{table}] table and top-level keys ({', '.join(others)}); "
            f"put every setting in [{table}] or none"
        )
    return _one_spelling(data[table], path)


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
        if f.name not in skip:
            add_flag(parser, f)


def add_flag(parser: argparse.ArgumentParser, f: dataclasses.Field, help: str | None = None) -> None:
    """The flag of one field, with its declared help or, where a command words it for itself, `help`."""
    flag = "--" + f.name.replace("_", "-")
    help_text = f.metadata.get("help", "") if help is None else help
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
