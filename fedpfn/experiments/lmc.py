"""The alignment gate: where does permutation misalignment exist from a shared start, and do shared
anchors remove it? Linear mode connectivity, weight matching and one-shot fusion, arm by arm.

    python -m fedpfn.experiments.lmc --dataset fmnist --model cnn --split same-data --start init \
        --arms plain,shared,independent,diff-init --anchor-ratio 0.4 --seeds 0,1,2 --out DIR

For each seed, K models train from one start (the random initialisation, or it trained N epochs
first) on their own Dirichlet shards or on the same data in their own batch orders, in each arm
(`fedpfn.experiments.lmc_run`: plain, one shared anchor mask, independent masks, different
initialisations). Between every pair: the signed loss and accuracy barriers, the barrier after
weight matching, the permutation-attributable loss P and the fraction of units matching moves,
measured on the data `--where` names (`fedpfn.analysis.fusion`). Writes `DIR/lmc.json` and
`DIR/lmc.png` and prints a summary table.

This module is the command: its settings, their checks (every problem reported at once, one
line each, exit 2, before any data is loaded), and the run over seeds and arms.
"""

from __future__ import annotations

import argparse
import math
import re
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import torch

from fedpfn.analysis import repair
from fedpfn.analysis.fusion import WHERE, EvalData, Scope, has_batchnorm
from fedpfn.analysis.matchers import MATCHERS
from fedpfn.core import provenance
from fedpfn.core.anchors import AnchorScope, MaskGranularity, scope_unused
from fedpfn.core.data import DATASETS, DataChoice, DataError, load_dataset
from fedpfn.core.models import MODELS
from fedpfn.core.seeding import MAX_SEED, Draw
from fedpfn.core.settings import above, at_least, between, each, field_map, one_of, setting, shown_default
from fedpfn.core.training import pick_device
from fedpfn.experiments import command
from fedpfn.experiments.bounds import MAX_POINTS, lmc_problems, meta_model, odd_points
from fedpfn.experiments.command import MachineChoice, machine_problems, output_problems, read_settings
from fedpfn.experiments.lmc_render import DIVERGED, OUTPUT_FILES, markdown_table, write_outputs
from fedpfn.experiments.lmc_run import (
    ARM_KINDS,
    SPLITS,
    Arm,
    SeedSetup,
    TrainSpec,
    arms_for,
    bn_probe,
    by_matcher,
    held_out_sets,
    hold_out,
    initial_model,
    measured,
    over_seeds,
    paired_difference,
    run_arm,
    sample_pool,
    split_pool,
    train_start,
    train_subsets,
)



MAX_START_EPOCHS = 1000
LMC_MODELS = tuple(m for m in MODELS if m != "vit_tiny28")  # weight matching (permspec) has no ViT
MAX_MODELS = 64  # K models mean K (K - 1) / 2 matched pairs


def _distinct(check: Callable[[Any], str | None]) -> Callable[[tuple], str | None]:
    """`check` on every item of a comma list, and no item repeated."""

    def check_all(values: tuple) -> str | None:
        reason = each(check)(values)
        if reason is None and len(set(values)) != len(values):
            reason = f"{shown_default(values)} repeats a value"
        return reason

    return check_all


START = re.compile(r"init|trained:(\d{1,4})")


def _start(text: str) -> str | None:
    found = START.fullmatch(text)
    if found is None or (found.group(1) is not None and not 1 <= int(found.group(1)) <= MAX_START_EPOCHS):
        return f"unknown '{text}'; use init, or trained:N with N epochs in [1, {MAX_START_EPOCHS}]"
    return None


def start_epochs(start: str) -> int:
    """Epochs the shared start trains before the K models part: 0 for `init`."""
    return 0 if start == "init" else int(start.split(":")[1])


@dataclass(frozen=True)
class LmcConfig(AnchorScope, MaskGranularity, DataChoice, MachineChoice):
    """Every setting of one analysis; saved as the `config` of lmc.json (the anchors' scope with them).

    The dataset and the masks' granularity are the shared groups' settings, listed where lmc always
    listed them (command.listed); its ratios are its own, a list to sweep (fedpfn.core.anchors.MaskDraw)."""

    BEFORE: ClassVar[dict[str, str]] = {  # a group's: listed before
        "dataset": "model", "granularity": "matchers", "data_root": "threads", "device": "threads"
    }  # fmt: skip
    model: str = setting("mlp", f"one of {', '.join(LMC_MODELS)}", one_of(LMC_MODELS))
    width: int = setting(0, "the mlp's hidden width (0: its own, 200)", between(0, 1 << 14))
    arms: tuple[str, ...] = setting(
        ARM_KINDS,
        "comma list of plain (the baseline, required), shared (one mask for the K models), "
        "independent (each its own mask: the control), diff-init (own initialisations: the positive control)",
        _distinct(one_of(ARM_KINDS)),
    )
    anchor_ratio: tuple[float, ...] = setting(
        (0.4,), "fraction of entries fixed as anchors in the shared and independent arms, each in (0, 1)",
        _distinct(between(0, 1, low_open=True, high_open=True)),
    )  # fmt: skip
    start: str = setting("init", "where the K models part: init (the random initialisation) or trained:N", _start)
    models: int = setting(2, "K models per seed, all from one start", between(2, MAX_MODELS))
    seeds: tuple[int, ...] = setting(
        (0, 1, 2), f"comma list of seeds, each in [0, {MAX_SEED}]", _distinct(between(0, MAX_SEED))
    )
    epochs: int = setting(3, "training epochs of each model", between(1, 1000))
    lr: float = setting(0.05, "SGD learning rate", between(0, 100, low_open=True))
    momentum: float = setting(0.9, "SGD momentum, in [0, 1)", between(0, 1, high_open=True))
    weight_decay: float = setting(5e-4, "SGD weight decay", between(0, 1))
    batch_size: int = setting(64, "training batch size", between(1, 1 << 16))
    points: int = setting(11, f"interpolation points in [0, 1], ends included: odd, at most {MAX_POINTS}", odd_points)
    split: str = setting(
        "dirichlet",
        "dirichlet: each model its own shard; same-data: all of it, own batch order",
        one_of(SPLITS),
    )
    alpha: float = setting(0.5, "Dirichlet concentration (smaller = more label skew)", above(0))
    where: str = setting(
        "union", "where figures are measured: test, own (each model's held-out data) or union (a pair's)",
        one_of(WHERE),
    )  # fmt: skip
    held_out: float = setting(
        0.2, "fraction of each model's samples held out for own/union (--where test holds none out)", between(0.01, 0.5)
    )
    train_subset: int = setting(
        0, "seeded training subset per seed (0 = the whole training set)", at_least(0)
    )
    test_subset: int = setting(
        0, "fixed test subset, the same for every seed (0 = the whole test set)", at_least(0)
    )
    matchers: tuple[str, ...] = setting(
        MATCHERS,
        "comma list of matchers, each reported under its name: full (weight matching, required: the top-level "
        "figures are its), masked (identical coordinates left out), changes (changes from the common start; "
        "omitted for diff-init), activation (held-out activations' correlations)",
        _distinct(one_of(MATCHERS)),
    )
    bn_batches: int = setting(
        20, "fixed training batches for BatchNorm statistics, or REPAIR's where the model has no BatchNorm "
        "(0: neither)", between(0, 1000),
    )  # fmt: skip
    bn_batch_size: int = setting(256, "size of each of those batches", between(1, 1 << 14))
    threads: int = setting(
        0, "torch CPU threads, 0 for torch's choice; 1 is far faster on a busy shared CPU", between(0, 1024)
    )


# --------------------------------------------------------------------------- checks


def read_config(values: Mapping[str, Any]) -> tuple[LmcConfig, list[str]]:
    """The config from loosely typed values, and every problem with them (`command.read_settings`)."""
    return read_settings(LmcConfig, values)


def relation_problems(cfg: LmcConfig) -> list[str]:
    """Problems no single setting shows: sizes that depend on K, a missing GPU, missing data files."""
    found = []
    if cfg.arms and "plain" not in cfg.arms:
        found.append(f"arms: {','.join(cfg.arms)} leaves out plain, the baseline every arm is paired with")
    if cfg.matchers and "full" not in cfg.matchers:
        found.append(f"matchers: {','.join(cfg.matchers)} leaves out full, whose figures are the top-level ones")
    if cfg.split == "dirichlet" and 0 < cfg.train_subset < 10 * cfg.models:
        found.append(
            f"train_subset: {cfg.train_subset} leaves a shard under 10 samples; "
            f"use 0 (all) or at least {10 * cfg.models} for {cfg.models} models"
        )
    return found + machine_problems(cfg.dataset, cfg.data_root, cfg.device)


NO_ANCHORS = (lambda c: not {"shared", "independent"} & set(c.arms), "no shared or independent arm uses it")
UNUSED = {  # a setting the run would not use, given on the command line: why
    **{name: NO_ANCHORS for name in ("anchor_ratio", "granularity", *field_map(AnchorScope))},
    "alpha": (lambda c: c.split != "dirichlet", "only the dirichlet split uses it"),
    "held_out": (lambda c: c.where == "test", "--where test measures on the test set, not on held-out data"),
    "test_subset": (lambda c: c.where != "test", "only --where test measures on the test set"),
    "width": (lambda c: c.model != "mlp", "only the mlp has a hidden width"),
    "bn_batch_size": (lambda c: c.bn_batches == 0, "--bn-batches 0 computes no BatchNorm or REPAIR statistics"),
}


def unused_problems(cfg: LmcConfig, given: set[str]) -> list[str]:
    """Settings the user gave that this run would not use: refused rather than silently ignored; a scope
    switch for parameters the model lacks (`--no-anchor-norm` on the MLP) too."""
    found = [f"{key}: {reason}; drop it" for key, (unused, reason) in UNUSED.items() if key in given and unused(cfg)]
    scope = given & set(field_map(AnchorScope)) - {line.split(":")[0] for line in found}
    if scope and cfg.model in LMC_MODELS and cfg.dataset in DATASETS:
        found += scope_unused(meta_model(cfg.model, cfg.dataset), cfg.model, scope)  # whatever its width
    return found


# --------------------------------------------------------------------------- the run


@dataclass
class Prepared:
    """The data on its device and every seed's setup, all drawn before any training."""

    train: tuple[torch.Tensor, torch.Tensor]
    device: torch.device
    setups: list[SeedSetup]


def _subset_problem(name: str, wanted: int, available: int) -> None:
    if wanted > available:
        raise ValueError(
            f"{name}: {wanted} exceeds the {available} samples there are; use at most {available} or 0 (all)"
        )


def train_spec(cfg: LmcConfig) -> TrainSpec:
    return TrainSpec(cfg.epochs, cfg.lr, cfg.momentum, cfg.weight_decay, cfg.batch_size,
                     start_epochs=start_epochs(cfg.start))  # fmt: skip


def setup_seed(cfg: LmcConfig, train: tuple, test: EvalData, shape: tuple, classes: int, seed: int) -> SeedSetup:
    """Everything random about a seed: starts, training subset, shards and their held-out parts, BN batches."""
    device = train[0].device
    model, init = initial_model(cfg.model, shape, classes, seed, device, cfg.width)
    pool = sample_pool(len(train[1]), cfg.train_subset, seed, Draw.LMC_TRAIN_POOL)
    shards = split_pool(train[1].cpu(), pool, cfg.models, cfg.split, cfg.alpha, seed)
    indices, held = hold_out(shards, 0.0 if cfg.where == "test" else cfg.held_out, seed)  # test: nothing held out
    trainable = torch.cat(indices).unique()
    spec = train_spec(cfg)
    starts = [train_start(model, init, train, trainable, seed, spec)]
    if "diff-init" in cfg.arms:
        for k in range(cfg.models):
            _, own = initial_model(cfg.model, shape, classes, seed, device, cfg.width, which=k + 1)
            starts.append(train_start(model, own, train, trainable, seed, spec))
    sizes = [len(h) for h in held] if cfg.where != "test" else [math.ceil(len(test.y) / cfg.models)] * cfg.models
    fitted = held_out_sets(*train, train_subsets(indices, sizes, seed), what="training subset")
    scope = Scope(cfg.where, test, held_out_sets(*train, held), fitted)
    probe = bn_probe(model, train[0], trainable, cfg.bn_batches, cfg.bn_batch_size, seed)
    return SeedSetup(seed, model, starts, indices, scope, probe)


def prepare(cfg: LmcConfig) -> Prepared:
    """Load the data and draw every seed's setup; raises DataError or ValueError with one line."""
    device = pick_device(cfg.device != "cpu")
    data = load_dataset(cfg.dataset, cfg.data_root)
    _subset_problem("train_subset", cfg.train_subset, len(data.train_y))
    _subset_problem("test_subset", cfg.test_subset, len(data.test_y))
    test_x, test_y = data.test_x, data.test_y
    if cfg.test_subset:
        keep = sample_pool(len(test_y), cfg.test_subset, 0, Draw.LMC_TEST_POOL)  # seed 0: one test set for all
        test_x, test_y = test_x[keep], test_y[keep]
    train = (data.train_x.to(device), data.train_y.to(device))
    test = EvalData("test set", test_x.to(device), test_y.to(device))
    setups = [setup_seed(cfg, train, test, data.input_shape, data.num_classes, seed) for seed in cfg.seeds]
    return Prepared(train, device, setups)


def seed_line(name: str, result: Mapping[str, Any]) -> str:
    """One seed's figures in the table's units: nats for losses, points for accuracies."""
    if DIVERGED in result:
        return f"seed {result['seed']} {name:>15}: {result[DIVERGED]}; no figures ({result['seconds']:.1f} s)"
    return (
        f"seed {result['seed']} {name:>15}: loss barrier {result['loss_barrier']:+.3f} "
        f"(matched {result['matched_loss_barrier']:+.3f}), P {result['permutation_loss']:+.3f}, "
        f"moved {100 * result['moved_fraction']:.0f} %, fused {100 * result['fused_acc']:.2f} % "
        f"vs own {100 * result['mean_individual_acc']:.2f} %"
        + (f", ensemble {100 * result['ensemble_acc']:.2f} %" if "ensemble_acc" in result else "")
        + (f", REPAIRed barrier {result['repair_loss_barrier']:+.3f}" if "repair_loss_barrier" in result else "")
        + f" ({result['seconds']:.1f} s)"
    )


def run_lmc(cfg: LmcConfig, prepared: Prepared, log: Callable[[str], None] = print) -> dict[str, Any]:
    """Train and measure every arm for every seed; summaries over seeds, arms paired with plain."""
    started = time.perf_counter()
    arms: list[Arm] = arms_for(cfg.arms, cfg.anchor_ratio)
    settings: dict[str, dict[str, Any]] = {a.name: {"arm": a.kind, "anchor_ratio": a.ratio, "seeds": []} for a in arms}
    spec = train_spec(cfg)
    for setup in prepared.setups:
        for arm in arms:
            result = run_arm(setup, arm, prepared.train, spec, cfg.granularity, cfg.points, cfg.matchers, cfg)
            settings[arm.name]["seeds"].append(result)
            log(seed_line(arm.name, result))
    plain = measured(settings["plain"]["seeds"])
    for name, entry in settings.items():
        finite = measured(entry["seeds"])
        entry["summary"] = {**over_seeds(finite), "matchers": by_matcher(finite)}
        if len(finite) < len(entry["seeds"]):
            entry["summary"]["diverged_seeds"] = len(entry["seeds"]) - len(finite)
        if name != "plain":
            entry["vs_plain"] = {**paired_difference(finite, plain), "matchers": by_matcher(finite, plain)}
    config = command.recorded(cfg)
    with_bn = has_batchnorm(prepared.setups[0].model) and cfg.bn_batches > 0
    config["bn_recalibration"] = f"{cfg.bn_batches} batches of {cfg.bn_batch_size}" if with_bn else "none"
    first = prepared.setups[0].probe
    config["repair"] = repair.note(first.model, first.bn_batches)
    config["distance"] = "L2 over the trainable parameters; buffers (BatchNorm statistics) left out"
    config["device"] = str(prepared.device)
    config["measured_on"] = prepared.setups[0].scope.where
    return {"config": config, "settings": settings, "seconds": time.perf_counter() - started}


# --------------------------------------------------------------------------- command line


def build_parser(prog: str = "python -m fedpfn.experiments.lmc") -> argparse.ArgumentParser:
    return command.build_parser(prog, __doc__, LmcConfig, ", ".join(OUTPUT_FILES))


def main(argv: list[str] | None = None, prog: str = "python -m fedpfn.experiments.lmc") -> int:
    args = vars(build_parser(prog).parse_args(argv))
    out = Path(args.pop("out")).expanduser()
    overwrite = bool(args.pop("overwrite", False))
    cfg, found = read_config(args)
    found += unused_problems(cfg, set(args))
    found += command.not_yet_refused(found, relation_problems(cfg)) + output_problems(out, overwrite, OUTPUT_FILES)
    found = found or lmc_problems(cfg)  # memory and work, estimated from settings that passed their checks
    if found:
        return command.fail(found)
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    try:
        prepared = prepare(cfg)
    except (DataError, ValueError) as err:
        return command.fail(str(err).splitlines())
    result = run_lmc(cfg, prepared, log=lambda line: print(line, flush=True))
    result[provenance.KEY] = provenance.collect()  # which code, libraries and machine made these figures
    write_outputs(out, result)
    print(markdown_table(result))
    print(f"wrote {out / 'lmc.json'} and {out / 'lmc.png'} in {result['seconds']:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
