"""The checks every value of a study file passes (fedpfn.study.spec parses the file with them): a
table with known keys, a value of the accepted kind, flags as users type them, seeds; each
problem one line (StudyError) naming the file, the key and what is accepted."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

from fedpfn.core.seeding import MAX_SEED
from fedpfn.core.settings import ConfigError
from fedpfn.study.limits import MAX_SEEDS, shown

STUDY_OWNS = ("--seed", "--seeds", "--out", "--resume", "--overwrite", "--compare", "--algorithms")


class StudyError(ConfigError):
    """A study file that cannot run: one line naming the file, the key and what is accepted."""


def table_of(value: Any, where: str, keys: tuple[str, ...], path: Path) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise StudyError(f"study: {path}: {where} must be a table ([{where}]), not {type(value).__name__}")
    unknown = [k for k in value if k not in keys]
    if unknown:
        raise StudyError(f"study: {path}: unknown key '{unknown[0]}' in {where} (accepted: {', '.join(keys)})")
    return value


def value_of(value: Any, kind: type | tuple[type, ...], where: str, path: Path, accepted: str) -> Any:
    if isinstance(value, bool) and kind is not bool or not isinstance(value, kind):
        raise StudyError(f"study: {path}: {where} = {shown(value)} is not {accepted}")
    return value


def flags_of(value: Any, where: str, path: Path) -> tuple[str, ...]:
    """Flags as users type them: a list of strings, or one string split as a shell would."""
    if isinstance(value, str):
        try:
            tokens = shlex.split(value)
        except ValueError as err:
            raise StudyError(f"study: {path}: {where}: {err}") from None
    elif isinstance(value, list) and all(isinstance(v, str) for v in value):
        tokens = list(value)
    else:
        raise StudyError(f"study: {path}: {where} must be flags as typed: a string or a list of strings")
    owned = next((t for t in tokens if t.split("=")[0] in STUDY_OWNS), None)
    if owned is not None:
        raise StudyError(f"study: {path}: {where}: {owned} is the study's to set (seeds = [...], runs = ...); "
                         "leave it out")  # fmt: skip
    return tuple(tokens)


def seeds_of(value: Any, path: Path, where: str = "seeds") -> tuple[int, ...]:
    accepted = f"a list of 1 to {MAX_SEEDS} whole numbers from 0 to {MAX_SEED}, each once"
    if not isinstance(value, list) or not 0 < len(value) <= MAX_SEEDS:
        raise StudyError(f"study: {path}: {where} = {shown(value)} is not {accepted}")
    for seed in value:  # a seed given twice is named at its first place
        if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed <= MAX_SEED or value.count(seed) > 1:
            raise StudyError(f"study: {path}: {where}: {shown(seed)} is not accepted; seeds are {accepted}")
    return tuple(value)
