"""ColD fusion's evaluation (Don-Yehiya et al. 2023): the fused bodies of a ColD study's finished
runs, plain against shared anchors (each contributor's head is its own and never anchored).

    python -m fedpfn.experiments.pretrain --model cnn --out runs/pretrain-cnn-fmnist
    fedpfn study run studies/fusion/cold.toml     # the nine federated runs, one cell each (reused, resumed)
    fedpfn study page studies/fusion/cold.toml --trust-code    # this evaluation of them, and docs/fusion.md
    fedpfn cold --runs runs/cold-cnn-fmnist/runs --out runs/cold-cnn-fmnist   # the evaluation alone

The runs are a declared study's cells (studies/fusion/cold.toml: contributors are clients, each with its
own task, `--partition tasks`, and its own head, `--personal 'classifier.*'`; the body is
averaged), one folder each under RUNS/ARM/sSEED: plain (fedavg), shared anchors (fedpfn) and
independent masks at the same ratio (fedpfn with anchor masks per client, the control); the start
itself is the reference. This command starts no run: it reads the finished ones and evaluates
them (fedpfn.experiments.cold_eval): each contributor's task with its own head, and held-out tasks
with a fresh head (linear probe and full fine-tune), the arms paired by seed (95 % intervals,
Holm within each metric). The study's settings are read off the runs' config.json. Writes
DIR/cold.json, DIR/cold.md and DIR/cold.png (PDF beside it). A run that is missing, unfinished
or not a ColD run, and every bad setting, is refused in one line each, exit 2, before any work.
"""

from __future__ import annotations

import itertools
import json
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, ClassVar

import torch

from fedpfn.core import provenance
from fedpfn.core.anchors import BodyScope, MaskDraw
from fedpfn.core.arms import ANCHORED, FUSED, PLAIN, arm_of_masks, masks_word
from fedpfn.core.cache import validation_indices
from fedpfn.core.config import RunConfig
from fedpfn.core.data import DataError, load_dataset
from fedpfn.core.files import CONFIG, SUMMARY, DamagedFile, is_finished, model_file, read_json
from fedpfn.core.hyper import flat_view
from fedpfn.core.init_file import read_state_file, storage_budget
from fedpfn.core.models import build_model
from fedpfn.core.seeding import Draw, Stream, torch_generator
from fedpfn.core.settings import above, at_least, between, setting
from fedpfn.core.training import OptimizerSpec, pick_device
from fedpfn.experiments import pretrain
from fedpfn.experiments.cold_eval import (
    ARMS,
    COMPARISONS,
    METRICS,
    START,
    Images,
    ProbeSpec,
    held_out_figures,
    own_task_figures,
    read_cold_run,
)
from fedpfn.experiments.command import build_parser, fail, read_command_line, recorded, write_files
from fedpfn.experiments.soup import _distinct_seeds
from partitions.tasks import TASK_NAMES

OUTPUT_FILES = ("cold.json", "cold.md", "cold.png", "cold.pdf")
CLASSES = 10  # Fashion-MNIST's, whose tasks ColD's are
RUN_FLAGS = {  # the federated arms; `independent` is the control
    PLAIN: ("--algorithm", "fedavg"),
    **{arm: ("--algorithm", "fedpfn", "--anchor-masks", masks_word(arm)) for arm in ANCHORED},
}
CELL = "{arm}/s{seed}"  # a run's folder under the study's runs


@dataclass(frozen=True)
class ColdEval:
    """The evaluation's own settings (`fedpfn cold`'s flags; a study's `page.evaluate`)."""

    runs: str | None = setting(None, "the folder holding the study's finished runs, ARM/sSEED (plain, shared, independent)")
    seeds: tuple[int, ...] = setting((0, 1, 2), "comma list of the seeds whose runs are evaluated", _distinct_seeds)
    probe_samples: int = setting(2000, "samples a held-out task's fresh head fits on (Adam)", at_least(1))
    probe_epochs: int = setting(3, "epochs of each held-out probe", between(1, 100))
    probe_lr: float = setting(3e-3, "Adam's learning rate for the probes", above(0))
    test_subset: int = setting(0, "test images evaluated on, the same for every arm (0: all)", at_least(0))
    threads: int = setting(0, "torch CPU threads of the evaluation, 0 for torch's choice", at_least(0))


@dataclass(frozen=True)
class ColdConfig(BodyScope, MaskDraw):
    """Every setting of one ColD study, the runs' (read off their config.json) and the evaluation's;
    saved as the `config` of cold.json (the heads are personal, so no anchor_classifier). The anchored
    runs' draw is the soups' (MaskDraw), recorded where ColD always recorded it (command.listed)."""

    BEFORE: ClassVar[dict[str, str]] = {"anchor_ratio": "probe_samples", "granularity": "probe_samples"}

    start: str | None = None
    model: str = "cnn"
    seeds: tuple[int, ...] = (0, 1, 2)
    contributors: int = 8
    rounds: int = 2
    local_epochs: int = 1
    lr: float = 0.01
    batch_size: int = 64
    unseen_fraction: float = 0.5  # the runs' --validation-fraction: the probes fit on it
    probe_samples: int = 2000
    probe_epochs: int = 3
    probe_lr: float = 3e-3
    test_subset: int = 0
    data_root: str | None = None
    threads: int = 0


def run_flags(cfg: ColdConfig, arm: str, seed: int) -> list[str]:
    """`fedpfn run`'s flags for one arm and seed of ColD (configs/cold_fusion.toml's setting, from
    the start): what studies/fusion/cold.toml declares, and what `settings_of_run` reads back."""
    flags = [
        "--dataset", "fmnist", "--model", cfg.model, "--partition", "tasks", "--personal", "classifier.*",
        "--num-clients", str(cfg.contributors), "--clients-per-round", str(cfg.contributors),
        "--rounds", str(cfg.rounds), "--eval-every", str(cfg.rounds), "--local-epochs", str(cfg.local_epochs),
        "--batch-size", str(cfg.batch_size), "--lr", str(cfg.lr), "--validation-fraction", str(cfg.unseen_fraction),
        "--init", str(cfg.start), "--seed", str(seed), *RUN_FLAGS[arm],
    ]  # fmt: skip
    if arm != PLAIN:
        flags += ["--anchor-ratio", str(cfg.anchor_ratio), "--anchor-granularity", cfg.granularity, *cfg.run_flags()]
    return flags + (["--data-root", cfg.data_root] if cfg.data_root else [])


def arm_of(config: dict[str, Any]) -> str | None:
    """Which ColD arm a run's config.json is, by its algorithm and anchor masks (None: none)."""
    config = flat_view(config)
    if config.get("algorithm") == "fedavg":
        return PLAIN
    if config.get("algorithm") == "fedpfn":
        return arm_of_masks(config.get("anchor_masks"))
    return None


def settings_of_run(config: dict[str, Any]) -> dict[str, Any]:
    """The ColdConfig settings a run's config.json holds (run_flags read back); an anchored arm's
    anchors too."""
    config = flat_view(config)
    found = {"start": config.get("init"), "model": config.get("model"), "contributors": config.get("num_clients"),
             "rounds": config.get("rounds"), "local_epochs": config.get("local_epochs"), "lr": config.get("lr"),
             "batch_size": config.get("batch_size"), "unseen_fraction": config.get("validation_fraction"),
             "data_root": config.get("data_root")}  # fmt: skip
    if arm_of(config) in ANCHORED:
        found |= {"anchor_ratio": config.get("anchor_ratio"), "granularity": config.get("anchor_granularity"),
                  "anchor_bias": config.get("anchor_bias", True), "anchor_norm": config.get("anchor_norm", True)}  # fmt: skip
    return found


def run_problem(folder: Path, arm: str, seed: int) -> str | dict[str, Any]:
    """A finished ColD run's config.json, or why the folder is not one (one line)."""
    try:
        config = flat_view(read_json(folder / CONFIG))
    except (OSError, DamagedFile) as err:
        return f"runs: {folder} holds no readable {CONFIG} ({err}); run the study first (fedpfn study run)"
    if not is_finished(folder):
        return f"runs: {folder} did not finish (no {SUMMARY}); run the study again to resume it (fedpfn study run)"
    if (config.get("partition"), config.get("personal")) != ("tasks", "classifier.*") or config.get("seed") != seed:
        return f"runs: {folder} is not ColD's {arm} run of seed {seed} (--partition tasks --personal 'classifier.*')"
    if arm_of(config) != arm:
        return f"runs: {folder} is a {arm_of(config) or config.get('algorithm')} run, not ColD's {arm} arm"
    return config


def read_settings(runs: Path, settings: ColdEval) -> tuple[ColdConfig | None, list[str]]:
    """The study's settings from its runs' config.json, each arm of each seed; every problem, one line each."""
    if not runs.is_dir():
        return None, [f"runs: {runs} is not a folder; give the folder of the study's runs (its `runs`)"]
    found, configs = [], {}
    for seed, arm in itertools.product(settings.seeds, FUSED):
        read = run_problem(runs / CELL.format(arm=arm, seed=seed), arm, seed)
        found += [read] if isinstance(read, str) else []
        configs[arm, seed] = read
    if found:  # the first, and how many more: nine missing runs are one problem
        return None, [found[0] + (f" (and {len(found) - 1} more runs)" if len(found) > 1 else "")]
    first = {**settings_of_run(configs["shared", settings.seeds[0]]), **settings_of_run(configs["plain", settings.seeds[0]])}
    for (arm, seed), config in configs.items():
        differ = sorted(k for k, v in settings_of_run(config).items() if first.get(k) != v)
        if differ:
            found.append(f"runs: {runs / CELL.format(arm=arm, seed=seed)} ran with other settings than the "
                         f"study's other runs (differing: {', '.join(differ)})")  # fmt: skip
    evaluation = {k: v for k, v in asdict(settings).items() if k != "runs"}
    if found:
        return None, found
    cfg = ColdConfig(**first, **evaluation)
    more = relation_problems(cfg)
    return (None if more else cfg), more


def relation_problems(cfg: ColdConfig) -> list[str]:
    """What ColD asks of runs that `fedpfn run` takes alone: every task as many contributors, a start
    pretrained as the runs' model on Fashion-MNIST (where it recorded how)."""
    found = []
    if cfg.contributors % len(TASK_NAMES):
        found.append(f"contributors: {cfg.contributors} (the runs' --num-clients) leaves the {len(TASK_NAMES)} tasks "
                     f"uneven; run the study with a multiple of {len(TASK_NAMES)}")  # fmt: skip
    record, _ = pretrain.read_record(Path(str(cfg.start)))
    if record is not None and (record.model, record.dataset) != (cfg.model, "fmnist"):
        found.append(f"start: pretrained as {record.model} on {record.dataset}; ColD's tasks are Fashion-MNIST's, "
                     f"with --model {record.model}")  # fmt: skip
    return found


def images_for(config: dict[str, Any], test_subset: int, device: torch.device) -> Images:
    """Fashion-MNIST on `device`, the run's unseen share as the probes' pool, the fixed test images."""
    data = load_dataset("fmnist", config.get("data_root"))
    run, _ = RunConfig.parse({k: v for k, v in config.items() if "." not in k}, {})  # the split: core settings only
    pool = validation_indices(run)
    if test_subset > len(data.test_y):
        raise ValueError(f"test_subset: {test_subset} exceeds the {len(data.test_y)} test images")
    keep = torch.randperm(len(data.test_y), generator=torch_generator(0, Stream.ANALYSIS, Draw.COLD_TEST))
    keep = keep[:test_subset].sort().values if test_subset else torch.arange(len(data.test_y))
    return Images(data.train_x.to(device), data.train_y.to(device), pool.to(device),
                  data.test_x[keep].to(device), data.test_y[keep].to(device))  # fmt: skip


def probe_spec(cfg: ColdConfig) -> ProbeSpec:
    return ProbeSpec(OptimizerSpec("adam", cfg.probe_lr), cfg.probe_samples, cfg.probe_epochs, cfg.batch_size)


def same_state(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[n].cpu(), b[n].cpu()) for n in a)


def evaluate_seed(
    cfg: ColdConfig, runs: Path, seed: int, log: Callable[[str], None]
) -> dict[str, dict[str, Any]]:
    """The start and every fused arm of one seed."""
    device = pick_device()
    folders = {arm: runs / CELL.format(arm=arm, seed=seed) for arm in FUSED}
    images = images_for(read_json(folders["plain"] / CONFIG), cfg.test_subset, device)
    with torch.random.fork_rng(devices=[]):
        model = build_model(cfg.model, tuple(images.train_x.shape[1:]), CLASSES).to(device)
    budget = storage_budget(model)  # what a file of this model may declare, checked before it is read
    read = {arm: read_cold_run(folder, budget) for arm, folder in folders.items()}
    start = read_state_file(folders["plain"] / model_file(0), budget)
    spec = probe_spec(cfg)
    figures = {START: {"seed": seed, **held_out_figures(model, start, seed, images, spec)}}
    figures[START]["is_start_file"] = all(
        torch.equal(start[n], v) for n, v in read_state_file(str(cfg.start), budget).items() if n in start
    )
    for arm, (_config, body, heads) in read.items():
        figures[arm] = {
            "seed": seed, "run": str(folders[arm]),
            "started_at_start": same_state(read_state_file(folders[arm] / model_file(0), budget), start),
            **own_task_figures(model, body, heads, images), **held_out_figures(model, body, seed, images, spec),
        }  # fmt: skip
    for arm, f in figures.items():
        own = f"own tasks {100 * f['own_task_acc']:.2f} %, " if "own_task_acc" in f else ""
        log(
            f"seed {seed} {arm:>11}: {own}linear {100 * f['linear_acc']:.2f} %, full {100 * f['full_acc']:.2f} %"
        )
    return figures


def compare(per_arm: dict[str, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Every comparison on every metric both arms have, paired by seed; Holm within each metric
    over the comparisons computed."""
    from fedpfn.analysis.stats import adjust, paired

    found = []
    for (arm, base), metric in itertools.product(COMPARISONS, METRICS):
        if all(metric in r for r in per_arm[arm] + per_arm[base]):
            values = {a: {r["seed"]: r[metric] for r in per_arm[a]} for a in (arm, base)}
            found.append(paired(f"{arm} − {base}", metric, values[arm], values[base], 1.0))  # accuracies
    adjust(found)
    return [asdict(p) for p in found]


def evaluate_study(cfg: ColdConfig, runs: Path, log: Callable[[str], None] = print) -> dict[str, Any]:
    """Every seed's arms, then the paired comparisons."""
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    per_arm: dict[str, list[dict[str, Any]]] = {arm: [] for arm in ARMS}
    for seed in cfg.seeds:
        for arm, figures in evaluate_seed(cfg, runs, seed, log).items():
            per_arm[arm].append(figures)
    first = read_json(runs / CELL.format(arm="plain", seed=cfg.seeds[0]) / CONFIG)  # what the runs set themselves
    local = {k: first[k] for k in ("optimizer", "momentum", "weight_decay", "engine")}
    return {"config": recorded(cfg), "runs_local": local, "arms": per_arm, "comparisons": compare(per_arm)}


def evaluation(runs: Path, cfg: ColdConfig, log: Callable[[str], None] = print) -> dict[str, Any]:
    """cold.json's content for the finished runs under `runs` (read by read_settings into `cfg`):
    the figures, the start's recorded recipe, the runs' wall time and this machine's provenance."""
    started = time.perf_counter()
    result = evaluate_study(cfg, runs, log)
    record, _ = pretrain.read_record(Path(str(cfg.start)))
    result["start_record"] = recorded(record) if record is not None else None
    result["runs"] = str(runs)
    result["run_seconds"] = {f"{arm}/s{seed}": float(read_json(runs / CELL.format(arm=arm, seed=seed) / SUMMARY)["wall_seconds"])
                             for seed in cfg.seeds for arm in FUSED}  # fmt: skip
    result["seconds"] = time.perf_counter() - started
    result[provenance.KEY] = provenance.collect()  # which code, libraries and machine made these figures
    return result


def main(argv: list[str] | None = None, prog: str = "python -m fedpfn.experiments.cold") -> int:
    parser = build_parser(prog, __doc__, ColdEval, " and ".join(OUTPUT_FILES))
    settings, out, _given, found = read_command_line(parser, ColdEval, OUTPUT_FILES, argv)
    if settings.runs is None:
        found.append("runs: give the folder of the study's runs (fedpfn study run studies/fusion/cold.toml writes them)")
    cfg, more = (None, []) if found else read_settings(Path(settings.runs).expanduser(), settings)
    if found or more or cfg is None:
        return fail(found + more)
    try:
        result = evaluation(Path(settings.runs).expanduser(), cfg, lambda line: print(line, flush=True))
    except (DataError, ValueError) as err:
        return fail(str(err).splitlines()[:3])
    result["argv"], result["out"] = list(sys.argv[1:] if argv is None else argv), str(out)
    from fedpfn.experiments.cold_report import draw_figure, markdown

    table = markdown(result)
    write_files(out, {"cold.json": (json.dumps(result, indent=1) + "\n").encode(), "cold.md": table.encode()},
                draw=lambda staging: draw_figure(result, staging / "cold.png"))  # fmt: skip
    print(table)
    print(f"wrote {out / 'cold.json'}, cold.md and cold.png in {result['seconds']:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
