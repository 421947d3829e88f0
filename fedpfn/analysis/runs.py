"""Finished run folders, read strictly, and grouped into arms that can be compared.

A run folder is a folder with `config.json` and `summary.json` (searched below each
argument). Runs whose settings differ only in `seed` (and where and how they ran: `out`,
`checkpoint_every`, the engine, ...) form an arm. Arms are compared only if they share the
federation setting (data, model, clients, rounds, partition, local training, evaluation)
and the same seeds, since a seed fixes the partition and the client sampling: the
difference between two arms on one seed is then a paired difference. Which setting is of
which kind is declared with the setting (fedpfn.core.settings.KINDS).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fedpfn.core.config import RunFlags
from fedpfn.core.files import CONFIG, METRICS, PROVENANCE, SUMMARY, DamagedFile, is_finished, read_json, read_jsonl
from fedpfn.core.hyper import flat_view
from fedpfn.core.seeding import MAX_SEED
from fedpfn.core.settings import ConfigError, of_kind

# Where and how a run was executed, not what it computed: never part of an arm.
IGNORED_KEYS = (
    "seed", PROVENANCE, *of_kind(RunFlags, "bookkeeping"), *of_kind(RunFlags, "placement"),
    *of_kind(RunFlags, "tracking"),
)  # fmt: skip
# The federation setting: equal in every arm, or the arms are not comparable.
SETTING_KEYS = of_kind(RunFlags, "federation")
@dataclass
class Run:
    """One finished run folder: its settings (provenance left out) and its metric rows."""

    path: Path
    config: dict[str, Any]
    rows: list[dict[str, Any]]

    @property
    def seed(self) -> int:
        return int(self.config["seed"])


@dataclass
class Arm:
    """Runs of one setting over several seeds, sorted by seed."""

    label: str
    runs: list[Run]

    @property
    def seeds(self) -> list[int]:
        return [run.seed for run in self.runs]


# --- finding and reading run folders ------------------------------------------------------


def find_run_folders(paths: Iterable[str | Path]) -> list[Path]:
    """Every folder holding config.json below the arguments; unfinished ones are refused.

    In the order of the arguments (each one's runs by path), so arms are listed as given.
    """
    found: list[Path] = []
    for raw in paths:
        top = Path(raw)
        if not top.is_dir():
            raise ConfigError(f"runs: '{raw}' is not a folder")
        for folder, subfolders, files in os.walk(top):
            if CONFIG in files:
                found.append(Path(folder))
                subfolders.clear()  # a run's own subfolders hold no runs
            subfolders.sort()
    if not found:
        raise ConfigError(f"runs: no run folder (with {CONFIG}) below {', '.join(map(str, paths))}")
    unfinished = [str(p) for p in found if not is_finished(p)]
    if unfinished:
        raise ConfigError(
            f"runs: unfinished (no {SUMMARY}): {', '.join(unfinished)}; resume them "
            "(fedpfn resume DIR) or leave them out"
        )
    return list(dict.fromkeys(p.resolve() for p in found))


MAX_ROUND_BYTES = 1 << 50  # bytes one round may record (1 PB): far above any run, far below int64's end


def _read_json(path: Path) -> Any:
    """A folder's JSON file through the checked reader: a regular file, never a link, a FIFO or a
    device, with size and nesting limits (fedpfn.core.files.read_json)."""
    try:
        return read_json(path)
    except (OSError, DamagedFile) as err:
        raise ConfigError(f"runs: cannot read {path} ({err})") from None


def _shown(value: Any) -> str:
    text = json.dumps(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _whole(value: Any, low: int, high: int | None = None) -> bool:
    return type(value) is int and low <= value and (high is None or value <= high)


def value_problem(key: str, value: Any) -> str | None:
    """Why a value the report computes with is not what the tool writes there, or None."""
    if key in ("seed", "rounds", "round"):
        low, high = (0, MAX_SEED) if key == "seed" else (1, None)
        accepted = f"a whole number >= {low}" + (f" and <= {high}" if high is not None else "")
        return None if _whole(value, low, high) else f"{key} is {_shown(value)}, not {accepted}"
    if key == "test_accuracy" and not (value is None or (type(value) in (int, float) and 0 <= value <= 1)):
        return f"{key} is {_shown(value)}, not an accuracy in [0, 1] or null"
    if key in ("bytes_up", "bytes_down") and not (value is None or _whole(value, 0, MAX_ROUND_BYTES)):
        return f"{key} is {_shown(value)}, not a whole number of bytes in [0, 2^50] or null"
    return None


def read_metrics(path: Path, rounds: int) -> list[dict[str, Any]]:
    """Strictly: a finished run has rounds 1..rounds once each, the last one evaluated, and every
    value the report reads of the type the tool writes (a foreign folder may hold anything)."""
    try:
        rows = read_jsonl(path)
    except DamagedFile as err:
        raise ConfigError(f"runs: {err}") from None
    missing = next((number for number, row in enumerate(rows, 1) if "round" not in row), None)
    if missing is not None:
        raise ConfigError(f"runs: {path} line {missing} has no 'round'")
    for number, row in enumerate(rows, 1):
        for key in ("round", "test_accuracy", "bytes_up", "bytes_down"):
            if (problem := value_problem(key, row.get(key))) is not None:
                raise ConfigError(f"runs: {path} line {number}: {problem}")
    found = [row["round"] for row in rows]
    if len(found) != rounds or found != list(range(1, rounds + 1)):  # the length first: rounds may be huge
        raise ConfigError(
            f"runs: {path} holds rounds {_span(found)}; a finished run holds 1-{rounds} once each"
        )
    if rows[-1].get("test_accuracy") is None:
        raise ConfigError(f"runs: {path}: the last round has no test_accuracy")
    return rows


def _span(rounds: list[Any]) -> str:
    return ", ".join(map(str, rounds[:8])) + (", ..." if len(rounds) > 8 else "") if rounds else "none"


def read_run(path: Path) -> Run:
    config = _read_json(path / CONFIG)
    if not isinstance(config, dict) or "seed" not in config or "rounds" not in config:
        raise ConfigError(f"runs: {path / CONFIG} is not a run config (no seed or rounds)")
    for key in ("seed", "rounds"):
        if (problem := value_problem(key, config[key])) is not None:
            raise ConfigError(f"runs: {path / CONFIG}: {problem}")
    config.pop(PROVENANCE, None)
    config = flat_view(config)  # by name, as runs written before the namespaces (fedpfn.core.hyper)
    return Run(path, config, read_metrics(path / METRICS, config["rounds"]))


def load_runs(paths: Iterable[str | Path]) -> list[Run]:
    return [read_run(path) for path in find_run_folders(paths)]


# --- arms and comparability ----------------------------------------------------------------


def arm_key(config: dict[str, Any]) -> str:
    return json.dumps({k: v for k, v in config.items() if k not in IGNORED_KEYS}, sort_keys=True)


def is_setting_key(key: str) -> bool:
    return key in SETTING_KEYS


def varying_keys(configs: Sequence[dict[str, Any]]) -> list[str]:
    """Keys (outside IGNORED_KEYS) whose value differs between the configs that have them.

    An algorithm's own hyperparameters (anchor_ratio, prox_mu) are absent from the configs
    of other algorithms; absence is not a difference.
    """
    keys = sorted({k for c in configs for k in c} - set(IGNORED_KEYS))
    return [k for k in keys if len({json.dumps(c[k], sort_keys=True) for c in configs if k in c}) > 1]


@functools.cache
def _defaults() -> dict[str, Any]:
    """RunConfig's defaults, as its settings are typed."""
    fields = dataclasses.fields(RunFlags)
    return {f.name: f.default for f in fields if f.default is not dataclasses.MISSING}


def arm_labels(configs: Sequence[dict[str, Any]]) -> list[str]:
    """'fedpfn', 'fedpfn server=fedavgm': the algorithm, then what tells apart its own arms.

    A key shows where it varies between arms of the same algorithm and the arm's value
    is not the default, so two arms never share a label.
    """
    labels = []
    for config in configs:
        same_algorithm = [c for c in configs if c.get("algorithm") == config.get("algorithm")]
        keys = [k for k in varying_keys(same_algorithm) if k != "algorithm" and k in config]
        defaults = _defaults() if keys else {}
        extra = [f"{k}={display_value(config[k])}" for k in keys if k not in defaults or config[k] != defaults[k]]
        labels.append(" ".join([str(config.get("algorithm")), *extra]))
    return labels


def display_value(value: Any) -> str:
    return "null" if value is None else str(value)


def group_arms(runs: Sequence[Run]) -> list[Arm]:
    """Runs that differ only in IGNORED_KEYS (seed, out, ...) form one arm; one run per seed."""
    groups: dict[str, list[Run]] = {}
    for run in runs:
        groups.setdefault(arm_key(run.config), []).append(run)
    labels = arm_labels([group[0].config for group in groups.values()])
    check_distinct(labels, list(groups.values()))
    arms = []
    for label, group in zip(labels, groups.values()):
        group.sort(key=lambda run: run.seed)
        seeds = [run.seed for run in group]
        twice = sorted({s for s in seeds if seeds.count(s) > 1})
        if twice:
            paths = [str(run.path) for run in group if run.seed == twice[0]]
            raise ConfigError(f"runs: arm '{label}' has seed {twice[0]} more than once: {', '.join(paths)}")
        arms.append(Arm(label, group))
    return arms


def check_distinct(labels: Sequence[str], groups: Sequence[Sequence[Run]]) -> None:
    """Two arms whose configs differ only in keys that some runs lack cannot be told apart."""
    for i, label in enumerate(labels):
        if label in labels[:i]:
            first, second = groups[labels.index(label)][0], groups[i][0]
            keys = sorted(set(first.config) ^ set(second.config))
            raise ConfigError(
                f"runs: {first.path} and {second.path} differ only in settings one of them lacks "
                f"({', '.join(keys)}); were they made by different versions of fedpfn?"
            )


def _where(arms: Sequence[Arm], key: str, value: Any) -> str:
    paths = [str(run.path) for arm in arms for run in arm.runs if run.config.get(key) == value]
    return paths[0] + (f" and {len(paths) - 1} more" if len(paths) > 1 else "")


def comparability_problems(arms: Sequence[Arm]) -> list[str]:
    """One line per setting key that differs between arms, and one if the seeds differ."""
    configs = [arm.runs[0].config for arm in arms]
    problems = []
    for key in filter(is_setting_key, varying_keys(configs)):
        values = list(dict.fromkeys(json.dumps(c.get(key)) for c in configs))
        found = "; ".join(f"{v} in {_where(arms, key, json.loads(v))}" for v in values)
        problems.append(f"runs are not comparable: {key} differs between arms: {found}")
    if len({tuple(arm.seeds) for arm in arms}) > 1:
        found = "; ".join(
            f"'{arm.label}' has {seeds_text(arm.seeds)} ({arm.runs[0].path.parent})" for arm in arms
        )
        problems.append(f"runs are not comparable: the arms have different seeds: {found}")
    return problems


def seeds_text(seeds: Sequence[int]) -> str:
    return "seed " + ", ".join(map(str, seeds)) if len(seeds) == 1 else "seeds " + ", ".join(map(str, seeds))


def comparable_arms(runs: Sequence[Run]) -> list[Arm]:
    arms = group_arms(runs)
    problems = comparability_problems(arms)
    if problems:
        raise ConfigError("\n".join(problems))
    return arms


