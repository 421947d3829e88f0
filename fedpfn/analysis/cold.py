"""ColD fusion (Don-Yehiya et al. 2023) from a pretrained start, plain against shared anchors (each
contributor's head is its own and never anchored; --no-anchor-bias and --no-anchor-norm narrow the rest).

    python -m fedpfn.analysis.pretrain --model cnn --out runs/pretrain-cnn-fmnist
    python -m fedpfn.analysis.cold --start runs/pretrain-cnn-fmnist/model.safetensors --out runs/cold

Contributors are clients, each with its own task (`--partition tasks`) and its own head
(`--personal 'classifier.*'`); the body is averaged. Three arms run as real federated runs on
every seed, each `fedpfn run` in a process of its own (so this analysis imports nothing of the
runtime), one run folder each under DIR/runs/ARM/sSEED: plain (fedavg),
shared anchors (fedpfn) and independent masks at the same ratio (fedpfn with anchor masks per
client, the control); the start itself is the reference. Then ColD's evaluation
(fedpfn.analysis.cold_eval): each contributor's task with its own head, and held-out tasks with a
fresh head (linear probe and full fine-tune), the arms paired by seed (95 % intervals, Holm within
each metric). Writes DIR/cold.json, DIR/cold.md and DIR/cold.png (PDF beside it). Settings are
checked, every problem at once, one line each, exit 2, before any run starts; a folder holding runs
of other settings is refused.
"""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
import time
from collections.abc import Callable, Collection
from dataclasses import asdict, dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import torch

from fedpfn.analysis import pretrain
from fedpfn.analysis.cold_eval import (
    ARMS,
    COMPARISONS,
    FUSED,
    METRICS,
    START,
    Images,
    ProbeSpec,
    held_out_figures,
    own_task_figures,
    read_cold_run,
)
from fedpfn.analysis.bounds import meta_model
from fedpfn.analysis.command import build_parser, fail, read_command_line, write_files
from fedpfn.analysis.soup import _distinct_seeds
from fedpfn.core import provenance
from fedpfn.core.anchors import GRANULARITIES, BodyScope, scope_filled, scope_unused
from fedpfn.core.cache import validation_indices
from fedpfn.core.data import DataError, find_data_problem, load_dataset
from fedpfn.core.files import CONFIG, SUMMARY, DamagedFile, atomic_write_json, model_file, read_json
from fedpfn.core.init_file import (
    InitError,
    file_sha256,
    init_file_problem,
    load_start,
    read_state_file,
    storage_budget,
)
from fedpfn.core.models import MODELS, build_model, model_problem
from fedpfn.core.seeding import Draw, Stream, torch_generator
from fedpfn.core.settings import above, at_least, between, one_of, setting
from fedpfn.core.training import OptimizerSpec, pick_device
from partitions.tasks import TASK_NAMES

OUTPUT_FILES = ("cold.json", "cold.md", "cold.png", "cold.pdf")
SETTINGS_FILE = "cold_config.json"  # what the runs under DIR/runs were started with
IMAGE_SHAPE, CLASSES = (1, 28, 28), 10  # Fashion-MNIST's, whose tasks ColD's are
NOT_COMPARED = ("threads",)  # may differ when a folder's runs are reused
RUN_FLAGS = {  # the federated arms; `independent` is the control
    "plain": ("--algorithm", "fedavg"),
    "shared": ("--algorithm", "fedpfn", "--anchor-masks", "shared"),
    "independent": ("--algorithm", "fedpfn", "--anchor-masks", "client"),
}


@dataclass(frozen=True)
class ColdConfig(BodyScope):
    """Every setting of one ColD study; saved as the `config` of cold.json (the anchors' scope with them:
    biases and norms; the heads are personal, `--personal 'classifier.*'`, so no anchor_classifier)."""

    start: str | None = setting(None, "the pretrained start (python -m fedpfn.analysis.pretrain writes one)")
    model: str = setting("cnn", "the start's architecture: a zoo model or timm:NAME", model_problem)
    seeds: tuple[int, ...] = setting((0, 1, 2), "comma list of seeds, each a run per arm", _distinct_seeds)
    contributors: int = setting(
        8, f"clients, each a contributor; task k mod {len(TASK_NAMES)}", between(4, 1000)
    )
    rounds: int = setting(2, "ColD iterations (communication rounds)", between(1, 1000))
    local_epochs: int = setting(1, "a contributor's epochs on its task each round", between(1, 100))
    lr: float = setting(0.01, "contributors' SGD learning rate (with momentum 0.9, as runs have)", above(0))
    batch_size: int = setting(64, "contributors' and probes' batch size", at_least(1))
    unseen_fraction: float = setting(
        0.5, "share of the training set no contributor trains on (the runs' --validation-fraction); "
        "the held-out tasks' probes fit on it", between(0, 0.5, low_open=True),
    )  # fmt: skip
    anchor_ratio: float = setting(
        0.4, "fraction of entries fixed in the anchored arms", between(0, 1, low_open=True, high_open=True)
    )
    granularity: str = setting("weight", "anchor granularity: weight or neuron", one_of(GRANULARITIES))
    probe_samples: int = setting(2000, "samples a held-out task's fresh head fits on (Adam)", at_least(1))
    probe_epochs: int = setting(3, "epochs of each held-out probe", between(1, 100))
    probe_lr: float = setting(3e-3, "Adam's learning rate for the probes", above(0))
    test_subset: int = setting(0, "test images evaluated on, the same for every arm (0: all)", at_least(0))
    data_root: str | None = setting(None, "folder holding Fashion-MNIST (default: Debian's)")
    threads: int = setting(0, "torch CPU threads of the evaluation, 0 for torch's choice", at_least(0))


def start_problems(cfg: ColdConfig) -> list[str]:
    """The start file, its pretrain record against --model, and its tensors loaded into the model
    (every run starts from it: a file no run could start from is refused before the first)."""
    if cfg.start is None:
        return ["start: give the start file (python -m fedpfn.analysis.pretrain writes one)"]
    if problem := init_file_problem(cfg.start):
        return [f"start: {problem}"]
    record, found = pretrain.read_record(Path(cfg.start))
    if record is not None and (record.model, record.dataset) != (cfg.model, "fmnist"):
        found.append(f"start: pretrained as {record.model} on {record.dataset}; ColD's tasks are "
                     f"Fashion-MNIST's, with --model {record.model}")  # fmt: skip
    if found or model_problem(cfg.model):
        return found
    with torch.random.fork_rng(devices=[]):
        model = build_model(cfg.model, IMAGE_SHAPE, CLASSES)
    try:
        load_start(model, cfg.start, label="start")
    except InitError as err:
        return str(err).splitlines()
    return []


def folder_settings(cfg: ColdConfig) -> dict[str, Any]:
    """What the runs of a folder are tied to: the settings and the start file's content."""
    start = Path(str(cfg.start)).expanduser()
    digest = file_sha256(start) if start.is_file() else None
    return json.loads(json.dumps({**asdict(cfg), "start_sha256": digest}))


def folder_problems(cfg: ColdConfig, out: Path) -> list[str]:
    """A folder whose runs were started with other settings (or another start file) is never reused."""
    saved = out / SETTINGS_FILE
    if not saved.exists():
        return []
    try:
        before = read_json(saved)
    except (OSError, DamagedFile) as err:
        return [f"out: {saved} cannot be read ({err}); give another folder"]
    now, before = folder_settings(cfg), scope_filled(before, ColdConfig)  # runs before the scope: default scope
    differ = sorted(
        k for k in set(now) | set(before) if k not in NOT_COMPARED and before.get(k) != now.get(k)
    )
    if differ:
        return [
            f"out: {out} holds runs of other settings (differing: {', '.join(differ)}); give another folder"
        ]
    return []


def relation_problems(cfg: ColdConfig, out: Path, given: Collection[str] = ()) -> list[str]:
    """What no single setting shows: the start, the contributors, the data, the folder, a scope
    switch for parts the model lacks."""
    found = start_problems(cfg)
    if cfg.model in MODELS:  # a timm ViT has every part the scope names
        found += scope_unused(meta_model(cfg.model, "fmnist"), cfg.model, given)
    if cfg.contributors % len(TASK_NAMES):
        found.append(f"contributors: {cfg.contributors} leaves the {len(TASK_NAMES)} tasks uneven; "
                     f"give a multiple of {len(TASK_NAMES)}")  # fmt: skip
    if problem := find_data_problem("fmnist", cfg.data_root, False):
        found.append(f"data_root: {problem}")
    return found + folder_problems(cfg, out)


def run_flags(cfg: ColdConfig, arm: str, seed: int) -> list[str]:
    """`fedpfn run`'s flags for one arm and seed: configs/cold_fusion.toml's setting, from the start."""
    flags = [
        "--dataset", "fmnist", "--model", cfg.model, "--partition", "tasks", "--personal", "classifier.*",
        "--num-clients", str(cfg.contributors), "--clients-per-round", str(cfg.contributors),
        "--rounds", str(cfg.rounds), "--eval-every", str(cfg.rounds), "--local-epochs", str(cfg.local_epochs),
        "--batch-size", str(cfg.batch_size), "--lr", str(cfg.lr), "--validation-fraction", str(cfg.unseen_fraction),
        "--init", str(Path(str(cfg.start)).expanduser().resolve()), "--seed", str(seed), *RUN_FLAGS[arm],
    ]  # fmt: skip
    if arm != "plain":
        flags += ["--anchor-ratio", str(cfg.anchor_ratio), "--anchor-granularity", cfg.granularity, *cfg.run_flags()]
    return flags + (["--data-root", cfg.data_root] if cfg.data_root else [])


def run_once(folder: Path, flags: list[str]) -> float:
    """One federated run through the public command (reused when finished, resumed when killed);
    its wall time from its summary.json."""
    if not (folder / SUMMARY).exists():
        verb = (
            ["resume", str(folder)] if (folder / CONFIG).exists() else ["run", *flags, "--out", str(folder)]
        )
        command = [sys.executable, "-P", "-m", "fedpfn.cli.main", *verb]  # -P: nothing from the current folder
        done = subprocess.run(command, check=False, capture_output=True, text=True)
        if done.returncode:
            tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
            raise RuntimeError(f"run {folder} failed (exit {done.returncode}): " + " | ".join(tail))
    return float(read_json(folder / SUMMARY)["wall_seconds"])


def run_all(cfg: ColdConfig, out: Path) -> dict[str, float]:
    """Every arm on every seed (seed-major: a study cut short has every arm of its first seeds)."""
    seconds = {}
    for seed in cfg.seeds:
        for arm in FUSED:
            folder = out / "runs" / arm / f"s{seed}"
            seconds[f"{arm}/s{seed}"] = run_once(folder, run_flags(cfg, arm, seed))
            print(f"run {arm} seed {seed}: {folder} ({seconds[f'{arm}/s{seed}']:.0f} s)", flush=True)
    return seconds


def images_for(config: dict[str, Any], test_subset: int, device: torch.device) -> Images:
    """Fashion-MNIST on `device`, the run's unseen share as the probes' pool, the fixed test images."""
    data = load_dataset("fmnist", config.get("data_root"))
    pool = validation_indices(SimpleNamespace(**config))  # type: ignore[arg-type]
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
    cfg: ColdConfig, out: Path, seed: int, log: Callable[[str], None]
) -> dict[str, dict[str, Any]]:
    """The start and every fused arm of one seed."""
    device = pick_device()
    folders = {arm: out / "runs" / arm / f"s{seed}" for arm in FUSED}
    images = images_for(read_json(folders["plain"] / CONFIG), cfg.test_subset, device)
    with torch.random.fork_rng(devices=[]):
        model = build_model(cfg.model, tuple(images.train_x.shape[1:]), CLASSES).to(device)
    budget = storage_budget(model)  # what a file of this model may declare, checked before it is read
    runs = {arm: read_cold_run(folder, budget) for arm, folder in folders.items()}
    start = read_state_file(folders["plain"] / model_file(0), budget)
    spec = probe_spec(cfg)
    figures = {START: {"seed": seed, **held_out_figures(model, start, seed, images, spec)}}
    figures[START]["is_start_file"] = all(
        torch.equal(start[n], v) for n, v in read_state_file(str(cfg.start), budget).items() if n in start
    )
    for arm, (config, body, heads) in runs.items():
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


def evaluate_study(cfg: ColdConfig, out: Path, log: Callable[[str], None] = print) -> dict[str, Any]:
    """Every seed's arms, then the paired comparisons."""
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    per_arm: dict[str, list[dict[str, Any]]] = {arm: [] for arm in ARMS}
    for seed in cfg.seeds:
        for arm, figures in evaluate_seed(cfg, out, seed, log).items():
            per_arm[arm].append(figures)
    first = read_json(out / "runs" / "plain" / f"s{cfg.seeds[0]}" / CONFIG)  # what the runs set themselves
    local = {k: first[k] for k in ("optimizer", "momentum", "weight_decay", "engine")}
    return {"config": asdict(cfg), "runs_local": local, "arms": per_arm, "comparisons": compare(per_arm)}


def main(argv: list[str] | None = None, prog: str = "python -m fedpfn.analysis.cold") -> int:
    parser = build_parser(prog, __doc__, ColdConfig, " and ".join(OUTPUT_FILES))
    cfg, out, given, found = read_command_line(parser, ColdConfig, OUTPUT_FILES, argv)
    found += relation_problems(cfg, out, given)
    if found:
        return fail(found)
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_json(out / SETTINGS_FILE, folder_settings(cfg))
    started = time.perf_counter()
    try:
        run_seconds = run_all(cfg, out)
        result = evaluate_study(cfg, out, lambda line: print(line, flush=True))
    except (RuntimeError, DataError, ValueError) as err:
        return fail(str(err).splitlines()[:3])
    record, _ = pretrain.read_record(Path(str(cfg.start)))
    result["start_record"] = asdict(record) if record is not None else None
    result["argv"], result["out"] = list(sys.argv[1:] if argv is None else argv), str(out)
    result["run_seconds"], result["seconds"] = run_seconds, time.perf_counter() - started
    result[provenance.KEY] = provenance.collect()  # which code, libraries and machine made these figures
    from fedpfn.analysis.cold_report import draw_figure, markdown

    table = markdown(result)
    write_files(out, {"cold.json": (json.dumps(result, indent=1) + "\n").encode(), "cold.md": table.encode()},
                draw=lambda staging: draw_figure(result, staging / "cold.png"))  # fmt: skip
    print(table)
    print(f"wrote {out / 'cold.json'}, cold.md and cold.png in {result['seconds']:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
