"""Compare algorithms on the same partitions and seeds, in one folder.

    python run_sim.py --compare fedavg,fedprox,fedpfn,fedpnu --seeds 0,1,2 --out runs/cmp

Each (algorithm, seed) is an ordinary run folder under the comparison folder, so a long
comparison can be stopped and started again: a finished sub-run is reused and a killed one
resumed, but only if its config.json equals the requested settings (aside from `out`,
`overwrite`, `provenance` and where it computes or logs: engine, Ray, trackers); anything else
is refused, for every sub-run, before any run starts (fedpfn.runtime.ensure, the one primitive).
The partition depends only on the seed and the federation settings, never on the algorithm.
The table and figures are `fedpfn.analysis.report`'s, with the first algorithm as the baseline.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from fedpfn.analysis.render import write_report
from fedpfn.analysis.runs import read_run
from fedpfn.analysis.stats import Report, analyse
from fedpfn.analysis.terminal import show
from fedpfn.core.config import ConfigError, RunConfig
from fedpfn.core.files import (
    COMPARISON_CONFIG,
    CONFIG,
    DamagedFile,
    OwnOutputs,
    read_json,
)
from fedpfn.core.hyper import split_key
from fedpfn.core.places import out_problem
from fedpfn.core.seeding import MAX_SEED
from fedpfn.core.settings import is_set
from fedpfn.runtime.algorithms import for_algorithm, hparam_fields, problems, validated
from fedpfn.runtime.engines.registry import ENGINES
from fedpfn.runtime.ensure import ensure_run, run_action  # ensure_run: public here too (scripts import it)
from fedpfn.runtime.recording import LAST_ROUNDS

MIN_SEEDS = 3  # fewer: the paired intervals are zero-width or huge (1 degree of freedom)


def parse_list(text: str, name: str, kind: type = str) -> list:
    items = [item.strip() for item in str(text).split(",")]
    if not any(items):
        raise ConfigError(f"{name}: '{text}' is empty; give a comma-separated list")
    if not all(items):
        raise ConfigError(f"{name}: '{text}' has an empty item; give a comma-separated list without one")
    try:
        return [kind(item) for item in items]
    except ValueError:
        raise ConfigError(f"{name}: '{text}' must be a comma-separated list of {kind.__name__}s") from None


def check_seeds(seeds: Sequence[Any]) -> list[int]:
    """Whole numbers in numpy's seed range, each once: the first bad one is named."""
    accepted = f"seeds are whole numbers from 0 to {MAX_SEED}, each once"
    for seed in seeds:
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise ConfigError(f"seeds: '{seed}' is not a whole number; {accepted}")
        if not 0 <= seed <= MAX_SEED:
            raise ConfigError(f"seeds: {seed} is out of range; {accepted}")
    twice = next((s for i, s in enumerate(seeds) if s in seeds[:i]), None)
    if twice is not None:
        raise ConfigError(f"seeds: {twice} is given twice; {accepted}")
    if not seeds:
        raise ConfigError(f"seeds: none given; {accepted}")
    return list(seeds)


def seeds_warning(seeds: Sequence[int]) -> str | None:
    """Why paired intervals over so few seeds mean little (Student's t with n-1 df), or None from 3 on."""
    if len(seeds) >= MIN_SEEDS:
        return None
    if len(seeds) == 1:
        return "1 seed: the comparison has no spread and no intervals; give --seeds with 3 or more (0,1,2)"
    return (
        "2 seeds: each 95 % interval has 1 degree of freedom (t = 12.7), so it is either very wide or, "
        "where both seeds differ by the same amount, not given, and the exact test beside the t test cannot go "
        "below 0.5; give --seeds with 3 or more (0,1,2), or ask fedpfn seeds-needed how many"
    )


def check_algorithms(algorithms: Sequence[str]) -> list[str]:
    """Two or more algorithms, each once: one alone has nothing to be compared with."""
    twice = next((a for i, a in enumerate(algorithms) if a in algorithms[:i]), None)
    if twice is not None:
        raise ConfigError(f"compare: '{twice}' is given twice; name each algorithm once")
    if not algorithms:
        raise ConfigError("compare: no algorithm given")
    if len(algorithms) == 1:
        raise ConfigError(
            f"compare: '{algorithms[0]}' alone has nothing to be compared with; name two or more, "
            "comma-separated (fedavg,fedpfn), or run one algorithm with fedpfn run"
        )
    return list(algorithms)


def comparison_configs(
    base: RunConfig, algorithms: list[str], seeds: list[int], given: set[str] | None = None
) -> list[RunConfig]:
    """One validated config per (algorithm, seed); every problem reported at once (`given`: the
    settings the user named, fedpfn.core.settings.is_set)."""
    root = base.run_dir
    found = [p for a in algorithms for p in problems(dataclasses.replace(base, algorithm=a, hparams={}))
             if p.startswith("algorithm:")]  # fmt: skip
    if found:  # an unknown name first: for_algorithm needs a known one
        raise ConfigError("\n".join(found))
    configs = []
    for algorithm in algorithms:
        for seed in seeds:
            out = str(root / f"{algorithm}-s{seed}")
            cfg = dataclasses.replace(for_algorithm(base, algorithm).in_folder(out), seed=seed)
            try:
                configs.append(validated(cfg, given))
            except ConfigError as err:
                found += [p for p in str(err).splitlines() if p not in found]
    found += unused_settings(base, configs, given)
    if found:
        raise ConfigError("\n".join(found))
    return configs


def unused_settings(
    base: RunConfig, configs: Sequence[RunConfig], given: set[str] | None = None
) -> list[str]:
    """A hyperparameter that no compared algorithm uses would be dropped without a word (a name given
    alone is used where any of them declares it: fedprox.prox_mu uses prox_mu)."""
    used = {key for cfg in configs for key in cfg.hparams}
    used |= {split_key(key)[1] for key in used}
    defaults = {name: f.default for name, f in hparam_fields().items()}
    algorithms = ", ".join(dict.fromkeys(cfg.algorithm for cfg in configs))
    return [
        f"{key}: {value} is set, but none of {algorithms} uses it"
        for key, value in base.hparams.items()
        if key not in used and is_set(key, value, defaults.get(key), given)
    ]


def plan(configs: Sequence[RunConfig]) -> list[str]:
    """The action for every sub-run, decided before any of them runs; all refusals at once."""
    actions, problems = [], []
    for cfg in configs:
        try:
            actions.append(run_action(cfg))
        except ConfigError as err:
            problems.append(str(err))
    if problems:
        raise ConfigError("\n".join(problems))
    return actions


def run_one(cfg: RunConfig, action: str) -> None:
    """One sub-run through the one primitive (fedpfn.runtime.ensure), as `plan` decided."""
    ensure_run(cfg, action)


def check_root(root: Path) -> None:
    """The comparison's folder: the check every command's --out goes through, and not a single run's."""
    if (problem := out_problem(root, "a comparison")) is not None:
        raise ConfigError(problem)
    if (root / CONFIG).exists():
        raise ConfigError(f"out: '{root}' holds a single run, not a comparison; use another --out")


def written_by_compare(path: Path) -> bool:
    """A comparison_config.json written before the tool kept a manifest, known by its keys."""
    try:
        return set(read_json(path)) == {"base", "algorithms", "seeds", "command"}
    except (OSError, DamagedFile, TypeError):
        return False


def write_request(root: Path, request: dict[str, Any]) -> None:
    """comparison_config.json: replaced only if the tool wrote it (a user's file of that name is refused)."""
    outputs = OwnOutputs(root, "run_sim.py --compare", legacy=written_by_compare)
    try:
        outputs.check([COMPARISON_CONFIG])
        root.mkdir(parents=True, exist_ok=True)
        outputs.write(COMPARISON_CONFIG, (json.dumps(request, indent=2) + "\n").encode())
    except DamagedFile as err:
        raise ConfigError(str(err)) from None
    except OSError as err:  # made read-only, or full, since the check
        raise ConfigError(f"out: {root / COMPARISON_CONFIG} cannot be written ({err.strerror})") from None


def compare(
    base: RunConfig, algorithms: list[str], seeds: list[int], command: str, given: set[str] | None = None
) -> Report:
    """Run (or reuse) every algorithm on every seed, then print and write the report.

    Writes comparison.md/.csv/.json, comparison.png and paired_differences.png into the
    comparison folder, with the first algorithm as the baseline.
    """
    seeds, algorithms = check_seeds(seeds), check_algorithms(algorithms)
    if (warning := seeds_warning(seeds)) is not None:
        print(f"warning: {warning}", file=sys.stderr, flush=True)
    base = ENGINES[base.engine.name].prepare(base)  # placement as its sub-runs record it
    root = base.run_dir
    check_root(root)
    configs = comparison_configs(base, algorithms, seeds, given)
    actions = plan(configs)
    request = {"base": base.to_dict(), "algorithms": algorithms, "seeds": seeds, "command": command}
    write_request(root, request)
    for cfg, action in zip(configs, actions):
        run_one(cfg, action)
    runs = [read_run(cfg.run_dir.resolve()) for cfg in configs]
    report = analyse(runs, algorithms[0], k=LAST_ROUNDS, target=base.output.target_accuracy, command=command)
    write_report(report, root, name="comparison")
    show(report, root / "comparison.md")  # the headline table and one next: line; the files hold the rest
    return report
