"""Neuron-alignment analysis: linear mode connectivity and one-shot fusion, plain against TNA-PFN.

    python -m fedpfn.analysis.lmc --dataset fmnist --model mlp --anchor-ratio 0.4 --models 2 --seeds 0,1,2 --out DIR

For each seed, K models start from one initialisation and train on their own Dirichlet shards
(or on the same data in their own batch orders), once plainly and once per anchor ratio with
one anchor mask fixed for the whole training; then their interpolation curves, barriers and
plain average are measured (`fedpfn.analysis.fusion`). Writes `DIR/lmc.json` and `DIR/lmc.png`, and
prints a summary table.

This module is the command: its settings, their checks (every problem reported at once, one
line each, exit 2, before any data is loaded), the run over seeds and settings, and the output.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, NoReturn

import torch
from torch import nn

from fedpfn.core.anchors import GRANULARITIES, anchored_fraction
from fedpfn.core.data import DATASETS, DataError, find_data_problem, load_dataset
from fedpfn.core.files import atomic_write_bytes
from fedpfn.analysis.fusion import (
    SPLITS,
    Draw,
    Probe,
    StateDict,
    TrainSpec,
    analyse,
    anchor_mask,
    bn_batches,
    has_batchnorm,
    initial_model,
    mean_std,
    over_seeds,
    paired_difference,
    sample_pool,
    split_pool,
    train_models,
)
from fedpfn.core.models import MODELS
from fedpfn.core.seeding import MAX_SEED
from fedpfn.core.settings import (
    ConfigError,
    above,
    add_flags,
    at_least,
    between,
    each,
    field_map,
    one_of,
    parse_values,
    problems,
    setting,
    shown_default,
)
from fedpfn.core.training import pick_device

DEVICES = ("auto", "cpu", "cuda")
OUTPUT_FILES = ("lmc.json", "lmc.png", "lmc.pdf")  # all the tool writes into --out; nothing else is touched


def _distinct_seeds(seeds: tuple[int, ...]) -> str | None:
    """Each seed in numpy's range, none repeated."""
    reason = each(between(0, MAX_SEED))(seeds)
    if reason is None and len(set(seeds)) != len(seeds):
        reason = f"{shown_default(seeds)} repeats a seed"
    return reason


@dataclass(frozen=True)
class LmcConfig:
    """Every setting of one analysis; saved as the `config` of lmc.json."""

    dataset: str = setting("fmnist", f"one of {', '.join(DATASETS)}", one_of(DATASETS))
    model: str = setting("mlp", f"one of {', '.join(MODELS)}", one_of(MODELS))
    anchor_ratio: tuple[float, ...] = setting(
        (0.4,),
        "fraction of entries fixed as anchors, each in [0, 1); "
        "a comma list (0.2,0.4) trains the plain models once for all",
        each(between(0, 1, high_open=True)),
    )
    models: int = setting(2, "K models per seed, all from one initialisation", at_least(2))
    seeds: tuple[int, ...] = setting(
        (0, 1, 2), f"comma list of seeds, each in [0, {MAX_SEED}]", _distinct_seeds
    )
    epochs: int = setting(3, "training epochs of each model", at_least(1))
    lr: float = setting(0.05, "SGD learning rate", above(0))
    momentum: float = setting(0.9, "SGD momentum, in [0, 1)", between(0, 1, high_open=True))
    weight_decay: float = setting(5e-4, "SGD weight decay", at_least(0))
    batch_size: int = setting(64, "training batch size", at_least(1))
    points: int = setting(11, "interpolation points in [0, 1], both ends included", at_least(2))
    split: str = setting(
        "dirichlet",
        "dirichlet: each model its own shard; same-data: all of it, own batch order",
        one_of(SPLITS),
    )
    alpha: float = setting(0.5, "Dirichlet concentration (smaller = more label skew)", above(0))
    train_subset: int = setting(
        0, "seeded training subset per seed (0 = the whole training set)", at_least(0)
    )
    test_subset: int = setting(
        0, "fixed test subset, the same for every seed (0 = the whole test set)", at_least(0)
    )
    granularity: str = setting("weight", "anchor granularity: weight or neuron", one_of(GRANULARITIES))
    bn_batches: int = setting(20, "training batches BatchNorm statistics are recomputed on", at_least(0))
    bn_batch_size: int = setting(256, "size of each of those batches", at_least(1))
    data_root: str | None = setting(
        None, "folder holding the dataset files (default: Debian's folder for fmnist)"
    )
    device: str = setting("auto", "auto, cpu or cuda", one_of(DEVICES))
    threads: int = setting(
        0, "torch CPU threads, 0 for torch's choice; 1 is far faster on a busy shared CPU", at_least(0)
    )


def setting_name(ratio: float) -> str:
    return "plain" if ratio == 0 else f"anchored-{ratio:g}"


# --------------------------------------------------------------------------- checks


def read_config(values: Mapping[str, Any]) -> tuple[LmcConfig, list[str]]:
    """The config from loosely typed values, and every problem with them: bad text and failed checks.

    A value that cannot be read keeps its default, so the other values are still checked.
    """
    fields = field_map(LmcConfig)
    parsed: dict[str, Any] = {}
    found: list[str] = []
    for key, value in values.items():
        try:
            parsed.update(parse_values(fields, {key: value}))
        except ConfigError as err:
            found.append(str(err))
    cfg = LmcConfig(**parsed)
    return cfg, found + problems(cfg)


def relation_problems(cfg: LmcConfig) -> list[str]:
    """Problems no single setting shows: sizes that depend on K, a missing GPU, missing data files."""
    found = []
    if cfg.split == "dirichlet" and 0 < cfg.train_subset < 10 * cfg.models:
        found.append(
            f"train_subset: {cfg.train_subset} leaves a shard under 10 samples; "
            f"use 0 (all) or at least {10 * cfg.models} for {cfg.models} models"
        )
    if cfg.device == "cuda" and not torch.cuda.is_available():
        found.append("device: cuda, but no CUDA device is available; use auto or cpu")
    if cfg.dataset in DATASETS:
        data_problem = find_data_problem(cfg.dataset, cfg.data_root, False)
        if data_problem:
            found.append(f"dataset: {data_problem}")
    return found


def _nearest_existing(path: Path) -> Path:
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def output_problems(out: Path, overwrite: bool) -> list[str]:
    """Why the results could not be written to `out`, found before any training."""
    if str(out) in ("", "."):
        return ["out: give the folder to write lmc.json and lmc.png into"]
    if out.exists() and not out.is_dir():
        return [f"out: {out} is a file; give a folder (created if missing)"]
    base = _nearest_existing(out)
    if not base.is_dir():
        return [f"out: {base} is a file, so {out} cannot be created"]
    if not os.access(base, os.W_OK | os.X_OK):
        return [f"out: {base} is not writable; give a folder you can write to"]
    earlier = [name for name in OUTPUT_FILES if (out / name).exists() or (out / name).is_symlink()]
    if any(not (out / name).is_file() for name in earlier):
        return [f"out: {out} holds {', '.join(earlier)} that are not plain files; give another folder"]
    if earlier and not overwrite:
        ours = ", ".join(OUTPUT_FILES)
        advice = f"add --overwrite to replace {ours} (nothing else in it is touched), or give another folder"
        return [f"out: {out} already holds {', '.join(earlier)}; {advice}"]
    return []


# --------------------------------------------------------------------------- the run


@dataclass
class SeedSetup:
    """What the plain and anchored settings of one seed share: init, shards, probe (and batch orders,
    which `train_models` draws from the seed)."""

    seed: int
    model: nn.Module
    init: StateDict
    indices: list[torch.Tensor]
    probe: Probe


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


def setup_seed(
    cfg: LmcConfig,
    train: tuple[torch.Tensor, torch.Tensor],
    test: tuple[torch.Tensor, torch.Tensor],
    shape: tuple[int, int, int],
    classes: int,
    device: torch.device,
    seed: int,
) -> SeedSetup:
    """Everything random about a seed: the init, the training subset and its shards, the BatchNorm batches."""
    model, init = initial_model(cfg.model, shape, classes, seed, device)
    pool = sample_pool(len(train[1]), cfg.train_subset, seed, Draw.TRAIN_POOL)
    indices = split_pool(train[1].cpu(), pool, cfg.models, cfg.split, cfg.alpha, seed)
    bn = bn_batches(pool, cfg.bn_batches, cfg.bn_batch_size, seed) if has_batchnorm(model) else ()
    probe = Probe(model, *test, train[0] if bn else None, bn)
    return SeedSetup(seed, model, init, indices, probe)


def prepare(cfg: LmcConfig) -> Prepared:
    """Load the data and draw every seed's setup; raises DataError or ValueError with one line."""
    device = pick_device(cfg.device != "cpu")
    data = load_dataset(cfg.dataset, cfg.data_root)
    _subset_problem("train_subset", cfg.train_subset, len(data.train_y))
    _subset_problem("test_subset", cfg.test_subset, len(data.test_y))
    test_x, test_y = data.test_x, data.test_y
    if cfg.test_subset:
        keep = sample_pool(len(test_y), cfg.test_subset, 0, Draw.TEST_POOL)  # seed 0: one test set for all
        test_x, test_y = test_x[keep], test_y[keep]
    train = (data.train_x.to(device), data.train_y.to(device))
    test = (test_x.to(device), test_y.to(device))
    setups = [
        setup_seed(cfg, train, test, data.input_shape, data.num_classes, device, seed) for seed in cfg.seeds
    ]
    return Prepared(train, device, setups)


def run_setting(
    cfg: LmcConfig, setup: SeedSetup, train: tuple[torch.Tensor, torch.Tensor], ratio: float
) -> dict[str, Any]:
    """Train the K models of one seed with anchor ratio `ratio` (0 = plain) and analyse them."""
    started = time.perf_counter()
    mask = anchor_mask(setup.model, ratio, setup.seed, cfg.granularity)
    spec = TrainSpec(cfg.epochs, cfg.lr, cfg.momentum, cfg.weight_decay, cfg.batch_size)
    states = train_models(setup.model, setup.init, train, setup.indices, setup.seed, spec, mask)
    return {
        "seed": setup.seed,
        "shard_sizes": [len(i) for i in setup.indices],
        "anchored_fraction": anchored_fraction(mask) if mask is not None else 0.0,
        **analyse(setup.probe, states, cfg.points),
        "seconds": time.perf_counter() - started,
    }


def seed_line(name: str, result: Mapping[str, Any]) -> str:
    """One seed's figures in the table's units: loss barrier in nats, accuracies in %, gaps in points."""
    return (
        f"seed {result['seed']} {name:>13}: loss barrier {result['loss_barrier']:.3f}, "
        f"acc barrier {100 * result['acc_barrier']:.2f} pp, fused {100 * result['fused_acc']:.2f} % "
        f"vs mean own {100 * result['mean_individual_acc']:.2f} % ({result['seconds']:.1f} s)"
    )


def run_lmc(cfg: LmcConfig, prepared: Prepared, log: Callable[[str], None] = print) -> dict[str, Any]:
    """Train and analyse every setting (plain first, then each anchor ratio) for every seed."""
    started = time.perf_counter()
    ratios = [0.0] + sorted({r for r in cfg.anchor_ratio if r > 0})
    settings: dict[str, dict[str, Any]] = {setting_name(r): {"anchor_ratio": r, "seeds": []} for r in ratios}
    for setup in prepared.setups:
        for ratio in ratios:
            result = run_setting(cfg, setup, prepared.train, ratio)
            settings[setting_name(ratio)]["seeds"].append(result)
            log(seed_line(setting_name(ratio), result))
    for entry in settings.values():
        entry["summary"] = over_seeds(entry["seeds"])
        if entry is not settings["plain"]:
            entry["vs_plain"] = paired_difference(entry["seeds"], settings["plain"]["seeds"])
    config = asdict(cfg)
    with_bn = bool(prepared.setups[0].probe.bn_batches)
    config["bn_recalibration"] = f"{cfg.bn_batches} batches of {cfg.bn_batch_size}" if with_bn else "none"
    config["device"] = str(prepared.device)
    return {"config": config, "settings": settings, "seconds": time.perf_counter() - started}


# --------------------------------------------------------------------------- output

_COLUMNS = (  # (header, key, scale, decimals)
    ("loss barrier", "loss_barrier", 1, 3),
    ("acc barrier (pp)", "acc_barrier", 100, 2),
    ("rel. acc barrier (%)", "acc_barrier_rel", 100, 2),
    ("fused acc (%)", "fused_acc", 100, 2),
    ("mean individual acc (%)", "mean_individual_acc", 100, 2),
    ("gap (pp)", "fusion_gap", 100, 2),
)


def _table(first: str, rows: Sequence[tuple[str, Mapping[str, Any]]]) -> list[str]:
    lines = [f"| {first} | " + " | ".join(c[0] for c in _COLUMNS) + " |", "|---" * (len(_COLUMNS) + 1) + "|"]
    for name, stats in rows:
        cells = [
            f"{stats[key]['mean'] * scale:.{dec}f} ± {stats[key]['std'] * scale:.{dec}f}"
            for _, key, scale, dec in _COLUMNS
        ]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return lines


def markdown_table(result: Mapping[str, Any]) -> str:
    """Mean ± std over seeds of each figure, one row per setting, then the anchored settings'
    differences from plain, paired by seed; the std convention stated above them."""
    settings = result["settings"]
    n = len(settings["plain"]["seeds"])
    caption = (
        f"mean ± std over {n} seed{'s' * (n > 1)} (sample std, n − 1); accuracies in %, "
        "differences in percentage points (pp)"
    )
    lines = [caption, ""]
    lines += _table("setting", [(name, entry["summary"]) for name, entry in settings.items()])
    paired = [
        (f"{name} − plain", entry["vs_plain"]) for name, entry in settings.items() if "vs_plain" in entry
    ]
    if paired:
        lines += ["", *_table("paired by seed", paired)]
    return "\n".join(lines)


def band_note(result: Mapping[str, Any]) -> str:
    """What the plot's line and band are: mean and ± 1 sample std over how many curves."""
    plain = result["settings"]["plain"]
    seeds, curves = len(plain["seeds"]), plain["summary"]["curve"]["n"]
    over = f"{seeds} seed{'s' * (seeds > 1)}" + (f" x {curves // seeds} pairs" if curves != seeds else "")
    return f"line: mean over {over}; band: ± 1 std (n − 1)" if curves > 1 else f"one curve ({over}), no band"


def plot_curves(result: Mapping[str, Any], path: Path, title: str) -> list[Path]:
    """The LMC figure as `path` (PNG) and a PDF beside it, one column wide (fedpfn.analysis.plots).

    Top: test accuracy along the straight line between two models, mean over seeds x pairs
    (± 1 std), each setting's barrier marked where its mean curve falls furthest below the
    line joining its ends. Below: each anchored setting minus plain, pair by pair on the same
    seed (the same initialisation and shards), so the seed-to-seed spread cancels.
    """
    # matplotlib is imported here only: the LMC command's checks run without it
    from fedpfn.analysis.plots import OKABE_ITO, legend_below, new_figure, save, styled, wrapped

    @styled
    def figure() -> Any:
        anchored = [name for name in result["settings"] if name != "plain"]
        fig, axes = new_figure(2 if anchored else 1, 4.6 if anchored else 3.0, sharex=True)
        colors = dict(zip(result["settings"], OKABE_ITO))
        for name, entry in result["settings"].items():
            _path_panel(axes[0], entry["summary"]["curve"], _setting_label(name, entry), colors[name])
        axes[0].set_ylabel("test accuracy (%)")
        for name in anchored:
            _difference_panel(axes[1], result, name, colors[name])
        axes[-1].set_xlabel("position on the line: 0 = model A, 1 = model B")
        legend_below(fig, [handle for ax in axes for handle in ax.get_legend_handles_labels()[0]])
        cfg = result["config"]
        details = f"lr {cfg['lr']}, {cfg['granularity']}-level anchors; {band_note(result)}"
        fig.suptitle(wrapped(f"{title}\n{details}"))
        return fig

    return save(figure(), path)


def _setting_label(name: str, entry: Mapping[str, Any]) -> str:
    return "plain (no anchors)" if name == "plain" else f"anchored, ρ={entry['anchor_ratio']:g}"


def _path_panel(ax: Any, curve: Mapping[str, Any], label: str, color: str) -> None:
    """One setting's mean accuracy (%) along the path, its band, and its barrier marked."""
    alphas = curve["alpha"]
    mean = [100 * v for v in curve["acc_mean"]]
    std = [100 * v for v in curve["acc_std"]]
    ax.plot(alphas, mean, marker=".", color=color, label=label)
    ax.fill_between(alphas, [m - s for m, s in zip(mean, std)], [m + s for m, s in zip(mean, std)],
                    color=color, alpha=0.15, linewidth=0)  # fmt: skip
    line = [(1 - a) * mean[0] + a * mean[-1] for a in alphas]
    ax.plot(alphas, line, color=color, linestyle=":", linewidth=0.8)
    worst = max(range(len(alphas)), key=lambda i: line[i] - mean[i])
    gap = line[worst] - mean[worst]
    if gap > 0:
        ax.annotate("", xy=(alphas[worst], mean[worst]), xytext=(alphas[worst], line[worst]),
                    arrowprops={"arrowstyle": "<->", "color": color, "linewidth": 0.8})  # fmt: skip
        ax.annotate(f"barrier {gap:.1f} pp", (alphas[worst], (mean[worst] + line[worst]) / 2), xytext=(4, 0),
                    textcoords="offset points", color=color, va="center")  # fmt: skip


def _difference_panel(ax: Any, result: Mapping[str, Any], name: str, color: str) -> None:
    """`name` minus plain in accuracy points along the path, per (seed, pair), mean ± 1 std."""
    plain = {s["seed"]: s["pairs"] for s in result["settings"]["plain"]["seeds"]}
    diffs = [
        [100 * (a - b) for a, b in zip(pair["acc"], base["acc"])]
        for seed in result["settings"][name]["seeds"]
        for pair, base in zip(seed["pairs"], plain[seed["seed"]])
    ]
    alphas = result["settings"][name]["seeds"][0]["pairs"][0]["alpha"]
    stats = [mean_std(column) for column in zip(*diffs)]
    mean, std = [s["mean"] for s in stats], [s["std"] for s in stats]
    ax.plot(alphas, mean, marker=".", color=color, label=f"{_setting_label(name, result['settings'][name])} − plain")
    ax.fill_between(alphas, [m - s for m, s in zip(mean, std)], [m + s for m, s in zip(mean, std)],
                    color=color, alpha=0.15, linewidth=0)  # fmt: skip
    ax.axhline(0, color="black", linewidth=0.8)
    ax.set_ylabel("anchored − plain (pp)")


def plot_title(cfg: LmcConfig) -> str:
    split = f"Dirichlet({cfg.alpha:g}) shards" if cfg.split == "dirichlet" else "same data, own batch orders"
    return f"{cfg.dataset} {cfg.model}, K = {cfg.models}, {cfg.epochs} epoch{'s' * (cfg.epochs > 1)}, {split}"


def write_outputs(out: Path, result: Mapping[str, Any], title: str) -> None:
    """Write lmc.json and the figure (drawn in a private folder first, then moved in); each file
    is replaced whole, never written through a link, and nothing else in `out` is touched."""
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="fedpfn-lmc-") as staging:
        plot_curves(result, Path(staging) / "lmc.png", title)
        atomic_write_bytes(out / "lmc.json", (json.dumps(result, indent=1) + "\n").encode())
        for figure in sorted(Path(staging).iterdir()):
            if figure.name in OUTPUT_FILES:  # what the command says it writes, nothing more
                atomic_write_bytes(out / figure.name, figure.read_bytes())


# --------------------------------------------------------------------------- command line


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.exit(2, f"error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="python -m fedpfn.analysis.lmc",
        description=(__doc__ or "").split("\n\n")[0],
        argument_default=argparse.SUPPRESS,
    )
    parser.add_argument(
        "--out",
        metavar="DIR",
        required=True,
        help="folder for lmc.json and lmc.png, created if missing (required)",
    )
    parser.add_argument(
        "--overwrite",
        action="store_true",
        help="replace lmc.json and lmc.png already in --out; nothing else there is touched",
    )
    add_flags(parser, LmcConfig)
    return parser


def fail(lines: Sequence[str]) -> int:
    for line in lines:
        print(f"error: {line}", file=sys.stderr)
    return 2


def main(argv: list[str] | None = None) -> int:
    args = vars(build_parser().parse_args(argv))
    out = Path(args.pop("out")).expanduser()
    overwrite = bool(args.pop("overwrite", False))
    cfg, found = read_config(args)
    found += relation_problems(cfg) + output_problems(out, overwrite)
    if found:
        return fail(found)
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    try:
        prepared = prepare(cfg)
    except (DataError, ValueError) as err:
        return fail(str(err).splitlines())
    result = run_lmc(cfg, prepared, log=lambda line: print(line, flush=True))
    write_outputs(out, result, plot_title(cfg))
    print(markdown_table(result))
    print(f"wrote {out / 'lmc.json'} and {out / 'lmc.png'} in {result['seconds']:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
