"""Model soups of fine-tunes from one pretrained start, plain against shared anchors (TNA-PFN).

    python -m fedpfn.experiments.pretrain --out runs/pretrain
    python -m fedpfn.experiments.soup --start runs/pretrain/model.safetensors --seeds 0,1,2 --out runs/soup

For each seed, K ingredients fine-tune from the start on the downstream task (every class of
the training samples the pretraining left out, read from pretrain.json beside the start; the
whole training set for any other file) with hyperparameters drawn from the declared grid, in
three arms: plain, one shared anchor mask, and independent masks at the same ratio (the control).
Reports each ingredient, the uniform and greedy soups and the best single ingredient (selected
on a held-out split, then measured on the test set), signed barriers between ingredient pairs,
and the arms paired by seed (95 % intervals, Holm within each metric). Writes DIR/soup.json,
DIR/soup.md and DIR/soup.png (PDF beside it). Settings are checked, every problem at once,
one line each, exit 2, before any data is loaded.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import torch

from fedpfn.analysis.fusion import EvalData, Probe, has_batchnorm, snapshot
from fedpfn.core import provenance
from fedpfn.core.anchors import AnchorScope, MaskDraw, scope_unused
from fedpfn.core.data import DATASETS, DataChoice, DataError, DatasetSplits, load_dataset
from fedpfn.core.init_file import file_sha256, fresh_head_setting, init_file_problem, load_start
from fedpfn.core.models import MODELS, ModelChoice, build_model
from fedpfn.core.seeding import MAX_SEED, Draw, Stream, seed_for, torch_generator
from fedpfn.core.settings import above, at_least, between, each, one_of, setting
from fedpfn.core.training import OPTIMIZERS, OptimizerSpec, pick_device
from fedpfn.experiments import pretrain
from fedpfn.experiments.bounds import MAX_POINTS, meta_model, odd_points
from fedpfn.experiments.command import (
    MachineChoice,
    build_parser,
    fail,
    machine_problems,
    read_command_line,
    recorded,
    write_files,
)
from fedpfn.experiments.soup_run import ARMS, SeedData, compare_arms, recipes, run_arm

OUTPUT_FILES = ("soup.json", "soup.md", "soup.png", "soup.pdf")


def _distinct_seeds(seeds: tuple[int, ...]) -> str | None:
    reason = each(between(0, MAX_SEED))(seeds)
    if reason is None and len(set(seeds)) != len(seeds):
        reason = f"{','.join(map(str, seeds))} repeats a seed"
    return reason


ANY_OF_THEM = each(lambda _: None)  # a non-empty list of any values


@dataclass(frozen=True)
class SoupConfig(AnchorScope, MaskDraw, DataChoice, ModelChoice, MachineChoice):
    """Every setting of one soup experiment; saved as the `config` of soup.json (the anchors' scope with them).

    The model, the dataset and the mask's draw are the shared groups' settings, listed where soup always
    listed them (command.listed)."""

    BEFORE: ClassVar[dict[str, str]] = {  # a group's setting: the own setting it is listed before
        "model": "ingredients", "dataset": "ingredients", "anchor_ratio": "lr", "granularity": "lr",
        "data_root": "threads", "device": "threads",
    }
    WORDS: ClassVar[dict[str, str]] = {"model": "the start's architecture: a zoo model or timm:NAME"}

    start: str | None = setting(None, "the start: a state dict (.safetensors, or tensors-only .pt/.pth)")
    ingredients: int = setting(4, "K fine-tunes per seed and arm", between(2, 64))
    seeds: tuple[int, ...] = setting(
        (0, 1, 2), f"comma list of seeds, each in [0, {MAX_SEED}]", _distinct_seeds
    )
    lr: tuple[float, ...] = setting((1e-3, 3e-4), "learning rates the ingredients draw from", each(above(0)))
    epochs: tuple[int, ...] = setting(
        (1, 2), "epoch counts the ingredients draw from", each(between(1, 1000))
    )
    augment: tuple[bool, ...] = setting(
        (False, True), "augmentation off/on the ingredients draw from (flips, 2-pixel shifts)", ANY_OF_THEM
    )
    label_smoothing: tuple[float, ...] = setting(
        (0.0, 0.1), "label smoothing the ingredients draw from", each(between(0, 1, high_open=True))
    )
    optimizer: str = setting("adam", "sgd or adam", one_of(OPTIMIZERS))
    momentum: float = setting(0.9, "SGD momentum (sgd only)", between(0, 1, high_open=True))
    weight_decay: float = setting(0.0, "weight decay (L2)", at_least(0))
    batch_size: int = setting(128, "training batch size", at_least(1))
    fresh_head: bool = fresh_head_setting(True)
    train_subset: int = setting(
        6000, "downstream training samples per seed (0: all the downstream pool)", at_least(0)
    )
    held_out: int = setting(2000, "downstream samples held out per seed to select soups on", at_least(1))
    test_subset: int = setting(
        2000, "fixed test subset, the same for every seed (0: the whole test set)", at_least(0)
    )
    points: int = setting(
        5, f"interpolation points of a pair's barrier (odd, ends included, at most {MAX_POINTS})", odd_points
    )
    threads: int = setting(0, "torch CPU threads, 0 for torch's choice", at_least(0))  # fmt: skip


def relation_problems(cfg: SoupConfig, given: set[str]) -> list[str]:
    """What no single setting shows: the start file and its record, unused settings, GPU, data."""
    found = []
    if cfg.start is None:
        found.append("start: give the start file (python -m fedpfn.experiments.pretrain writes one)")
    elif problem := init_file_problem(cfg.start):
        found.append(f"start: {problem}")
    else:
        record, lines = pretrain.read_record(Path(cfg.start))
        found += lines
        if record is not None and (record.model, record.dataset) != (cfg.model, cfg.dataset):
            found.append(f"start: pretrained as {record.model} on {record.dataset}; give --model {record.model} "
                         f"--dataset {record.dataset}")  # fmt: skip
    if cfg.optimizer != "sgd" and "momentum" in given:
        found.append("momentum: only --optimizer sgd uses it; drop it")
    if cfg.model in MODELS and cfg.dataset in DATASETS:  # a timm ViT has every part the scope names
        found += scope_unused(meta_model(cfg.model, cfg.dataset), cfg.model, given)
    return found + machine_problems(cfg.dataset, cfg.data_root, cfg.device)


def downstream_pool(cfg: SoupConfig, labels: torch.Tensor) -> tuple[torch.Tensor, str]:
    """Training indices the downstream task may use, and what they are, in words."""
    record, _ = pretrain.read_record(Path(str(cfg.start)))
    if record is None:
        return torch.arange(len(labels)), "the whole training set (the start has no pretrain.json)"
    pool = pretrain.split_training_set(labels, record).downstream
    return pool, (f"every class of the {len(pool)} training samples outside the pretraining's upstream share "
                  f"(seed {record.seed}, fraction {record.upstream_fraction})")  # fmt: skip


def setup_seed(
    cfg: SoupConfig, data: DatasetSplits, pool: torch.Tensor, test: EvalData, seed: int
) -> tuple[SeedData, list[str]]:
    """One seed's start (the file, the seed's head where fresh), samples, recipes and probe."""
    device = test.x.device
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed_for(seed, Stream.INIT))
        model = build_model(cfg.model, data.input_shape, data.num_classes).to(device)
    notes = load_start(model, str(cfg.start), fresh_head=cfg.fresh_head, label="start")
    order = pool[torch.randperm(len(pool), generator=torch_generator(seed, Stream.ANALYSIS, Draw.SOUP_POOL))]
    held, rest = order[: cfg.held_out], order[cfg.held_out :]
    train = rest[: cfg.train_subset] if cfg.train_subset else rest
    held_out = EvalData("held-out", data.train_x[held].to(device), data.train_y[held].to(device))
    bn: tuple[torch.Tensor, ...] = ()
    if has_batchnorm(model):  # averaged weights get their own statistics, from the same batches
        bn = tuple(
            train[
                torch.randperm(len(train), generator=torch_generator(seed, Stream.ANALYSIS, Draw.SOUP_BN))
            ].split(256)[:20]
        )
    probe = Probe(model, data.train_x.to(device) if bn else None, bn)
    grid = {
        "lr": cfg.lr,
        "epochs": cfg.epochs,
        "augment": cfg.augment,
        "label_smoothing": cfg.label_smoothing,
    }
    setup = SeedData(
        seed, model, snapshot(model), train, held_out, test, recipes(grid, cfg.ingredients, seed), probe
    )
    return setup, notes


def prepare(cfg: SoupConfig) -> tuple[list[SeedData], tuple[torch.Tensor, torch.Tensor], dict[str, Any]]:
    """Load the data and set up every seed; raises DataError or ValueError (InitError) with its lines.
    The start is recorded by its sha256 beside its path (soup.json)."""
    device = pick_device(cfg.device != "cpu")
    data = load_dataset(cfg.dataset, cfg.data_root)
    pool, described = downstream_pool(cfg, data.train_y)
    wanted = cfg.held_out + (cfg.train_subset or 1)
    if wanted > len(pool):
        raise ValueError(f"held_out + train_subset: {wanted} exceeds the {len(pool)} downstream samples")
    if cfg.test_subset > len(data.test_y):
        raise ValueError(f"test_subset: {cfg.test_subset} exceeds the {len(data.test_y)} test samples")
    keep = torch.randperm(len(data.test_y), generator=torch_generator(0, Stream.ANALYSIS, Draw.SOUP_TEST))
    keep = keep[: cfg.test_subset] if cfg.test_subset else keep.sort().values
    test = EvalData("test", data.test_x[keep].to(device), data.test_y[keep].to(device))
    setups, notes = [], []
    for seed in cfg.seeds:
        setup, said = setup_seed(cfg, data, pool, test, seed)
        setups.append(setup)
        notes += [note for note in said if note not in notes]
    train = (data.train_x.to(device), data.train_y.to(device))
    recorded = {"downstream": described, "start_sha256": file_sha256(str(cfg.start)), "notes": notes}
    return setups, train, {**recorded, "device": str(device)}


def run_soups(cfg: SoupConfig, setups: list[Any], train: tuple[torch.Tensor, torch.Tensor],
              log: Callable[[str], None] = print) -> dict[str, dict[str, Any]]:  # fmt: skip
    """Every arm on every seed, then the paired comparisons."""
    spec = OptimizerSpec(cfg.optimizer, cfg.lr[0], momentum=cfg.momentum if cfg.optimizer == "sgd" else 0.0,
                         weight_decay=cfg.weight_decay)  # fmt: skip
    per_arm: dict[str, list[dict[str, Any]]] = {arm: [] for arm in ARMS}
    for setup in setups:
        for arm in ARMS:
            result = run_arm(
                setup, arm, train, spec, cfg.batch_size, (cfg.anchor_ratio, cfg.granularity, cfg), cfg.points
            )
            per_arm[arm].append(result)
            log(f"seed {setup.seed} {arm:>11}: best {100 * result['best_acc']:.2f} %, uniform "
                f"{100 * result['uniform_acc']:.2f} %, greedy {100 * result['greedy_acc']:.2f} % "
                f"(kept {len(result['greedy_kept'])}), loss barrier {result['loss_barrier']:+.3f} "
                f"({result['seconds']:.0f} s)")  # fmt: skip
    return {"arms": per_arm, "comparisons": compare_arms(per_arm)}


def main(argv: list[str] | None = None, prog: str = "python -m fedpfn.experiments.soup") -> int:
    parser = build_parser(prog, __doc__, SoupConfig, ", ".join(OUTPUT_FILES))
    cfg, out, given, found = read_command_line(parser, SoupConfig, OUTPUT_FILES, argv)
    found += relation_problems(cfg, given)
    if found:
        return fail(found)
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    started = time.perf_counter()
    try:
        setups, train, described = prepare(cfg)
    except (DataError, ValueError) as err:
        return fail(str(err).splitlines())
    for note in described["notes"]:
        print(note)
    result = {
        "config": recorded(cfg),
        **described,
        **run_soups(cfg, setups, train, lambda s: print(s, flush=True)),
    }
    result["seconds"] = time.perf_counter() - started
    record, _ = pretrain.read_record(Path(str(cfg.start)))  # the start's own recipe, where it recorded one
    result["start_record"] = recorded(record) if record is not None else None
    result["argv"], result["out"] = list(sys.argv[1:] if argv is None else argv), str(out)
    result[provenance.KEY] = provenance.collect()  # which code, libraries and machine made these figures
    from fedpfn.experiments.soup_report import draw_figure, markdown

    table = markdown(result)
    write_files(out, {"soup.json": (json.dumps(result, indent=1) + "\n").encode(), "soup.md": table.encode()},
                draw=lambda staging: draw_figure(result, staging / "soup.png"))  # fmt: skip
    print(table)
    print(f"wrote {out / 'soup.json'}, soup.md and soup.png in {result['seconds']:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
