"""Neuron-alignment analysis: linear mode connectivity and one-shot fusion, plain against TNA-PFN.

    python -m fedpfn.lmc --dataset fmnist --model mlp --anchor-ratio 0.4 --models 2 --seeds 0,1,2 --out DIR

For each seed, K models start from ONE initialisation and train either on their own Dirichlet
shards of the training data or on the same data in different orders. They train twice from the
same start, on the same batches: plainly, and with one anchor mask for the whole training
(TNA-PFN: a `rho` part of the entries stays at its initial value). Then, for each setting:

- interpolation curves: test loss and accuracy of (1 - a) w_A + a w_B at evenly spaced a;
- barriers: the largest rise of the curve above the straight line between the end points
  (loss), or fall below it (accuracy, also relative to the line there);
- fusion: accuracy of the plain average of the K models against the mean of their own.

Models with BatchNorm have their running statistics recomputed for every model measured
(end points, interpolations, averages, alike) on the same fixed training batches, since averaged
weights do not match averaged statistics. Writes `DIR/lmc.json` and `DIR/lmc.png`, and prints a
summary table.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, NoReturn

import torch
from torch import nn

from fedpfn.anchors import (
    AnchorFreeze,
    AnchorMask,
    anchored_fraction,
    draw_mask,
    mask_seed,
)
from fedpfn.data import DATASETS, DatasetSplits, find_data_problem, load_dataset
from fedpfn.models import MODELS, build_model
from fedpfn.training import (
    NoHooks,
    evaluate,
    make_optimizer,
    minibatches,
    pick_device,
    train_local,
)
from partitions import partition_labels

State = dict[str, torch.Tensor]

SPLITS = ("dirichlet", "same-data")
METRICS = ("loss_barrier", "acc_barrier", "acc_barrier_rel", "fused_acc", "mean_individual_acc", "fusion_gap")


# --------------------------------------------------------------------------- weights


def interpolate_state(state_a: State, state_b: State, a: float) -> State:
    """(1 - a) w_A + a w_B per floating tensor; other tensors (BN batch counters) come from A.

    `torch.lerp` is exact at both ends (a = 0 gives w_A and a = 1 gives w_B bit for bit, and
    w_A = w_B gives w_A for every a), so a curve's end points are the models themselves.
    """
    return {
        name: torch.lerp(value, state_b[name], a) if value.is_floating_point() else value.clone()
        for name, value in state_a.items()
    }


def average_states(states: Sequence[State]) -> State:
    """The plain (unweighted) average of K states, as FedAvg over equal clients would give.

    Written as w_0 + mean_k(w_k - w_0) so that K identical models average to themselves exactly.
    """
    if not states:
        raise ValueError("average_states needs at least one state")
    first = states[0]
    fused = {}
    for name, value in first.items():
        if value.is_floating_point():
            offsets = torch.stack([s[name] - value for s in states]).mean(0)
            fused[name] = value + offsets
        else:
            fused[name] = value.clone()
    return fused


def has_batchnorm(model: nn.Module) -> bool:
    return any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in model.modules())


@torch.no_grad()
def reset_bn_stats(model: nn.Module, x: torch.Tensor, batches: Sequence[torch.Tensor]) -> None:
    """Recompute BatchNorm running statistics as the plain average over `batches` of `x`.

    Interpolated and averaged weights do not go with interpolated or averaged statistics
    (Jordan et al., REPAIR, 2023), so every measured model gets its own, from the same batches.
    Momentum None makes the running estimate a cumulative average; train mode, no gradients.
    """
    norms = [m for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    if not norms:
        return
    saved = [(m, m.momentum) for m in norms]
    was_training = model.training
    device = next(model.parameters()).device
    for m in norms:
        m.reset_running_stats()
        m.momentum = None
    model.train()
    try:
        for batch in batches:
            model(x[batch.to(x.device)].to(device))
    finally:
        for m, momentum in saved:
            m.momentum = momentum
        model.train(was_training)


@dataclass
class Probe:
    """Everything needed to measure a set of weights the same way every time."""

    model: nn.Module  # a skeleton the weights are loaded into
    test_x: torch.Tensor
    test_y: torch.Tensor
    bn_x: torch.Tensor | None = None  # training inputs for BatchNorm statistics
    bn_batches: tuple[torch.Tensor, ...] = ()
    eval_batch_size: int = 256  # CPU convolutions run about twice as fast as at 1000

    def measure(self, state: State) -> tuple[float, float]:
        """(test loss, test accuracy) of `state`, BatchNorm statistics recomputed if the model has any."""
        self.model.load_state_dict(state)
        if self.bn_x is not None and self.bn_batches:
            reset_bn_stats(self.model, self.bn_x, self.bn_batches)
        return evaluate(self.model, self.test_x, self.test_y, self.eval_batch_size)


# --------------------------------------------------------------------------- curves and barriers


def interpolation_curve(probe: Probe, state_a: State, state_b: State, points: int = 11) -> dict[str, list[float]]:
    """Test loss and accuracy at `points` evenly spaced a in [0, 1], both end points included."""
    if points < 2:
        raise ValueError(f"points={points}: an interpolation curve needs at least its two end points")
    alphas = [i / (points - 1) for i in range(points)]
    losses, accs = [], []
    for a in alphas:
        loss, acc = probe.measure(interpolate_state(state_a, state_b, a))
        losses.append(loss)
        accs.append(acc)
    return {"alpha": alphas, "loss": losses, "acc": accs}


def barrier(alphas: Sequence[float], values: Sequence[float], higher_is_worse: bool = True) -> float:
    """Largest excess of the curve over the straight line between its end points.

    Loss (higher is worse): max_a [L(a) - ((1 - a) L(0) + a L(1))]. Accuracy: max_a of the line
    minus the curve. Never negative when the end points are on the grid; 0 means no barrier.
    """
    start, end = values[0], values[-1]
    sign = 1.0 if higher_is_worse else -1.0
    return max(sign * (v - ((1 - a) * start + a * end)) for a, v in zip(alphas, values))


def relative_acc_barrier(alphas: Sequence[float], accs: Sequence[float]) -> float:
    """The accuracy barrier as a fraction of the straight line's accuracy at the point where it peaks."""
    start, end = accs[0], accs[-1]
    line = [(1 - a) * start + a * end for a in alphas]
    gaps = [lv - v for lv, v in zip(line, accs)]
    worst = max(range(len(gaps)), key=gaps.__getitem__)
    return gaps[worst] / line[worst] if line[worst] > 0 else 0.0


def curve_barriers(curve: dict[str, list[float]]) -> dict[str, float]:
    """Loss barrier, accuracy barrier and relative accuracy barrier of one curve."""
    return {
        "loss_barrier": barrier(curve["alpha"], curve["loss"], higher_is_worse=True),
        "acc_barrier": barrier(curve["alpha"], curve["acc"], higher_is_worse=False),
        "acc_barrier_rel": relative_acc_barrier(curve["alpha"], curve["acc"]),
    }


def fuse(probe: Probe, states: Sequence[State]) -> dict[str, Any]:
    """Accuracy of the averaged model against the mean of the models' own; gap = mean own - fused."""
    own = [probe.measure(s) for s in states]
    fused_loss, fused_acc = probe.measure(average_states(states))
    mean_acc = sum(acc for _, acc in own) / len(own)
    return {
        "individual_loss": [loss for loss, _ in own],
        "individual_acc": [acc for _, acc in own],
        "mean_individual_acc": mean_acc,
        "fused_loss": fused_loss,
        "fused_acc": fused_acc,
        "fusion_gap": mean_acc - fused_acc,
    }


# --------------------------------------------------------------------------- training


@dataclass(frozen=True)
class TrainSpec:
    """How each of the K models trains (shared by the plain and the anchored setting)."""

    epochs: int = 3
    lr: float = 0.05
    momentum: float = 0.9
    weight_decay: float = 5e-4
    batch_size: int = 64
    optimizer: str = "sgd"


def split_data(
    labels: torch.Tensor, pool: torch.Tensor, k: int, split: str, alpha: float, seed: int
) -> list[torch.Tensor]:
    """Training indices for each of the K models: Dirichlet(alpha) shards of `pool`, or all of it each."""
    if split == "same-data":
        return [pool.clone() for _ in range(k)]
    parts = partition_labels(labels[pool].numpy(), k, "dirichlet", alpha=alpha, seed=seed)
    return [pool[torch.from_numpy(p)] for p in parts]


def train_models(
    model: nn.Module,
    init: State,
    x: torch.Tensor,
    y: torch.Tensor,
    indices: Sequence[torch.Tensor],
    order_seeds: Sequence[int],
    spec: TrainSpec,
    mask: AnchorMask | None = None,
) -> list[State]:
    """Train one model per index set, each from `init`, with `mask` fixed at its initial values.

    The same `order_seeds` give the same batches, so plain and anchored runs differ only in
    the anchors. `model` is a skeleton that is reloaded for each of them.
    """
    states = []
    for idx, order_seed in zip(indices, order_seeds, strict=True):
        model.load_state_dict(init)
        hooks = AnchorFreeze(model, mask) if mask is not None else NoHooks()
        optimizer = make_optimizer(model, spec.optimizer, spec.lr, spec.momentum, spec.weight_decay)
        batches = minibatches(idx, spec.batch_size, spec.epochs, torch.Generator().manual_seed(order_seed))
        train_local(model, x, y, batches, optimizer, hooks)
        states.append({name: t.detach().clone() for name, t in model.state_dict().items()})
    return states


def analyse(probe: Probe, states: Sequence[State], points: int) -> dict[str, Any]:
    """Curves and barriers for every pair of models, their mean, and the fusion figures."""
    pairs = []
    for i, j in itertools.combinations(range(len(states)), 2):
        curve = interpolation_curve(probe, states[i], states[j], points)
        pairs.append({"models": [i, j], **curve, **curve_barriers(curve)})
    result: dict[str, Any] = {
        key: sum(p[key] for p in pairs) / len(pairs) for key in ("loss_barrier", "acc_barrier", "acc_barrier_rel")
    }
    result.update(fuse(probe, states))
    result["pairs"] = pairs
    return result


def mean_std(values: Sequence[float]) -> dict[str, float]:
    """Mean and sample standard deviation (n - 1; 0 for a single value)."""
    n = len(values)
    mean = sum(values) / n
    std = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1)) if n > 1 else 0.0
    return {"mean": mean, "std": std}


def summarise(per_seed: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Mean and std over seeds of each figure, and the mean curve (over seeds and pairs)."""
    summary = {key: mean_std([s[key] for s in per_seed]) for key in METRICS}
    curves = [p for s in per_seed for p in s["pairs"]]
    summary["curve"] = {
        "alpha": curves[0]["alpha"],
        **{
            f"{what}_{stat}": [mean_std(col)[stat] for col in zip(*(c[what] for c in curves))]
            for what in ("loss", "acc")
            for stat in ("mean", "std")
        },
    }
    return summary


def paired_difference(per_seed: Sequence[dict[str, Any]], baseline: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Mean and std over seeds of (setting - baseline) per figure, seed by seed.

    Both settings share the init, the shards and the batches of a seed, so the paired
    difference removes most of the seed-to-seed spread (how skewed the shards happen to be).
    """
    by_seed = {s["seed"]: s for s in baseline}
    return {key: mean_std([s[key] - by_seed[s["seed"]][key] for s in per_seed]) for key in METRICS}


# --------------------------------------------------------------------------- the experiment


@dataclass(frozen=True)
class LmcConfig:
    dataset: str = "fmnist"
    model: str = "mlp"
    anchor_ratios: tuple[float, ...] = (0.4,)
    models: int = 2
    seeds: tuple[int, ...] = (0, 1, 2)
    epochs: int = 3
    lr: float = 0.05
    momentum: float = 0.9
    weight_decay: float = 5e-4
    batch_size: int = 64
    points: int = 11
    split: str = "dirichlet"
    alpha: float = 0.5
    train_subset: int = 0  # 0 = the whole training set
    test_subset: int = 0  # 0 = the whole test set
    granularity: str = "weight"
    bn_batches: int = 20
    bn_batch_size: int = 256
    data_root: str | None = None
    device: str = "auto"
    threads: int = 0  # torch CPU threads; 0 = torch's default


def setting_name(ratio: float) -> str:
    return "plain" if ratio == 0 else f"anchored-{ratio:g}"


@dataclass
class SeedSetup:
    """What the plain and anchored settings of one seed share: init, shards, batch orders, probe."""

    model: nn.Module
    init: State
    indices: list[torch.Tensor]
    order_seeds: list[int]
    probe: Probe


def setup_seed(cfg: LmcConfig, data: DatasetSplits, train_x: torch.Tensor, test: tuple[torch.Tensor, torch.Tensor],
               device: torch.device, seed: int) -> SeedSetup:
    """Everything random about a seed: the init, the training subset and its shards, the batch
    orders, the BatchNorm recalibration batches. The anchor mask is drawn per setting."""
    torch.manual_seed(seed)
    model = build_model(cfg.model, data.input_shape, data.num_classes).to(device)
    init = {name: t.detach().clone() for name, t in model.state_dict().items()}
    gen = torch.Generator().manual_seed(seed)
    pool = torch.randperm(len(data.train_y), generator=gen)
    pool = pool[: cfg.train_subset] if cfg.train_subset else pool
    indices = split_data(data.train_y, pool, cfg.models, cfg.split, cfg.alpha, seed)
    bn_batches: tuple[torch.Tensor, ...] = ()
    if has_batchnorm(model) and cfg.bn_batches:
        bn_order = pool[torch.randperm(len(pool), generator=gen)]
        bn_batches = tuple(bn_order.split(cfg.bn_batch_size)[: cfg.bn_batches])
    probe = Probe(model, test[0], test[1], train_x if bn_batches else None, bn_batches)
    return SeedSetup(model, init, indices, [seed * 1_000 + k for k in range(cfg.models)], probe)


def run_setting(cfg: LmcConfig, setup: SeedSetup, train: tuple[torch.Tensor, torch.Tensor],
                ratio: float, seed: int) -> dict[str, Any]:
    """Train the K models of one seed with anchor ratio `ratio` (0 = plain) and analyse them.

    The mask comes from the seed alone, so for weight granularity the anchors of a smaller
    ratio are a subset of those of a larger one.
    """
    started = time.perf_counter()
    mask = None
    if ratio > 0:
        mask = draw_mask(setup.model, ratio, mask_seed(seed, 0, "fixed"), cfg.granularity)
    spec = TrainSpec(cfg.epochs, cfg.lr, cfg.momentum, cfg.weight_decay, cfg.batch_size)
    states = train_models(setup.model, setup.init, *train, setup.indices, setup.order_seeds, spec, mask)
    return {
        "seed": seed,
        "shard_sizes": [len(i) for i in setup.indices],
        "anchored_fraction": anchored_fraction(mask) if mask is not None else 0.0,
        **analyse(setup.probe, states, cfg.points),
        "seconds": time.perf_counter() - started,
    }


def run_lmc(cfg: LmcConfig, log: Callable[[str], None] = print) -> dict[str, Any]:
    """Train and analyse every setting (plain first, then each anchor ratio) for every seed."""
    started = time.perf_counter()
    device = pick_device(cfg.device != "cpu")
    data = load_dataset(cfg.dataset, cfg.data_root)
    ratios = [0.0] + sorted({r for r in cfg.anchor_ratios if r > 0})
    test_x, test_y = data.test_x, data.test_y
    if cfg.test_subset:
        keep = torch.randperm(len(test_y), generator=torch.Generator().manual_seed(0))[: cfg.test_subset]
        test_x, test_y = test_x[keep], test_y[keep]
    train = (data.train_x.to(device), data.train_y.to(device))
    test = (test_x.to(device), test_y.to(device))

    settings: dict[str, dict[str, Any]] = {setting_name(r): {"anchor_ratio": r, "seeds": []} for r in ratios}
    for seed in cfg.seeds:
        setup = setup_seed(cfg, data, train[0], test, device, seed)
        for ratio in ratios:
            result = run_setting(cfg, setup, train, ratio, seed)
            settings[setting_name(ratio)]["seeds"].append(result)
            log(
                f"seed {seed} {setting_name(ratio):>13}: loss barrier {result['loss_barrier']:.4f}, "
                f"acc barrier {result['acc_barrier']:.4f}, fused {result['fused_acc']:.4f} vs "
                f"mean own {result['mean_individual_acc']:.4f} ({result['seconds']:.1f} s)"
            )
    for entry in settings.values():
        entry["summary"] = summarise(entry["seeds"])
        if entry is not settings["plain"]:
            entry["vs_plain"] = paired_difference(entry["seeds"], settings["plain"]["seeds"])
    config = asdict(cfg)
    config["bn_recalibration"] = (
        f"{cfg.bn_batches} batches of {cfg.bn_batch_size}" if setup.probe.bn_batches else "none"
    )
    config["device"] = str(device)
    return {"config": config, "settings": settings, "seconds": time.perf_counter() - started}


# --------------------------------------------------------------------------- reporting


def markdown_table(result: dict[str, Any]) -> str:
    """Mean ± std over seeds of each figure, one row per setting (accuracies in %, gaps in points),
    then the anchored settings' differences from plain, paired by seed."""
    columns = [  # (header, key, scale, decimals)
        ("loss barrier", "loss_barrier", 1, 3),
        ("acc barrier (pp)", "acc_barrier", 100, 2),
        ("rel. acc barrier (%)", "acc_barrier_rel", 100, 2),
        ("fused acc (%)", "fused_acc", 100, 2),
        ("mean individual acc (%)", "mean_individual_acc", 100, 2),
        ("gap (pp)", "fusion_gap", 100, 2),
    ]

    def table(first: str, rows: list[tuple[str, dict[str, Any]]]) -> list[str]:
        lines = [f"| {first} | " + " | ".join(c[0] for c in columns) + " |", "|---" * (len(columns) + 1) + "|"]
        for name, stats in rows:
            cells = [
                f"{stats[key]['mean'] * scale:.{dec}f} ± {stats[key]['std'] * scale:.{dec}f}"
                for _, key, scale, dec in columns
            ]
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
        return lines

    settings = result["settings"]
    lines = table("setting", [(name, entry["summary"]) for name, entry in settings.items()])
    paired = [(f"{name} − plain", entry["vs_plain"]) for name, entry in settings.items() if "vs_plain" in entry]
    if paired:
        lines += ["", *table("paired by seed", paired)]
    return "\n".join(lines)


def plot_curves(result: dict[str, Any], path: Path, title: str = "") -> None:
    """Mean interpolation curves over seeds (± std band), every setting on the same axes."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (acc_ax, loss_ax) = plt.subplots(1, 2, figsize=(10, 4))
    for name, entry in result["settings"].items():
        c = entry["summary"]["curve"]
        style = {"linestyle": "--", "color": "black"} if name == "plain" else {}
        for ax, what, scale in ((acc_ax, "acc", 100), (loss_ax, "loss", 1)):
            mean = [v * scale for v in c[f"{what}_mean"]]
            std = [v * scale for v in c[f"{what}_std"]]
            (line,) = ax.plot(c["alpha"], mean, marker=".", label=name, **style)
            ax.fill_between(
                c["alpha"], [m - s for m, s in zip(mean, std)], [m + s for m, s in zip(mean, std)],
                color=line.get_color(), alpha=0.15,
            )
    acc_ax.set(xlabel="a  ((1 - a) w_A + a w_B)", ylabel="test accuracy (%)", title=f"{title} accuracy".strip())
    loss_ax.set(xlabel="a  ((1 - a) w_A + a w_B)", ylabel="test cross-entropy", title=f"{title} loss".strip())
    for ax in (acc_ax, loss_ax):
        ax.grid(alpha=0.3)
    acc_ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)


# --------------------------------------------------------------------------- command line


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.exit(2, f"fedpfn.lmc: error: {message}\n")


def _float_list(text: str) -> tuple[float, ...]:
    try:
        return tuple(float(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of numbers") from None


def _int_list(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of integers") from None


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="python -m fedpfn.lmc", description=__doc__.split("\n\n")[0],
                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    d = LmcConfig()
    p.add_argument("--dataset", default=d.dataset)
    p.add_argument("--model", default=d.model)
    p.add_argument("--anchor-ratio", type=_float_list, default=d.anchor_ratios,
                   help="fraction of entries fixed, in [0, 1); a comma list trains the plain models once for all")
    p.add_argument("--models", type=int, default=d.models, help="K models per seed, from one initialisation")
    p.add_argument("--seeds", type=_int_list, default=d.seeds, help="comma list of seeds")
    p.add_argument("--out", required=True, help="folder for lmc.json and lmc.png")
    p.add_argument("--epochs", type=int, default=d.epochs)
    p.add_argument("--lr", type=float, default=d.lr)
    p.add_argument("--momentum", type=float, default=d.momentum)
    p.add_argument("--weight-decay", type=float, default=d.weight_decay)
    p.add_argument("--batch-size", type=int, default=d.batch_size)
    p.add_argument("--points", type=int, default=d.points, help="interpolation points in [0, 1], ends included")
    p.add_argument("--split", default=d.split, help="dirichlet: own shards; same-data: all data, own order")
    p.add_argument("--alpha", type=float, default=d.alpha, help="Dirichlet concentration")
    p.add_argument("--train-subset", type=int, default=d.train_subset, help="seeded training subset (0 = all)")
    p.add_argument("--test-subset", type=int, default=d.test_subset, help="fixed test subset (0 = all)")
    p.add_argument("--granularity", default=d.granularity, help="anchor granularity: weight or neuron")
    p.add_argument("--bn-batches", type=int, default=d.bn_batches, help="batches for BatchNorm statistics")
    p.add_argument("--bn-batch-size", type=int, default=d.bn_batch_size)
    p.add_argument("--data-root", default=None)
    p.add_argument("--device", default=d.device, help="auto, cpu or cuda")
    p.add_argument("--threads", type=int, default=d.threads,
                   help="torch CPU threads (0 = default); 1 is far faster on a busy shared CPU")
    return p


def config_problem(cfg: LmcConfig) -> str | None:
    """The first bad value, as one line, or None."""
    checks = [
        (cfg.dataset in DATASETS, f"unknown dataset {cfg.dataset!r}; choose one of {', '.join(DATASETS)}"),
        (cfg.model in MODELS, f"unknown model {cfg.model!r}; choose one of {', '.join(MODELS)}"),
        (len(cfg.anchor_ratios) > 0, "--anchor-ratio is empty; give a value in [0, 1)"),
        (all(0 <= r < 1 for r in cfg.anchor_ratios),
         f"anchor ratio {','.join(map(str, cfg.anchor_ratios))} must be in [0, 1) (0 = plain only)"),
        (cfg.models >= 2, f"--models {cfg.models}: need at least 2 models to interpolate"),
        (len(cfg.seeds) > 0, "--seeds is empty; give e.g. 0,1,2"),
        (len(set(cfg.seeds)) == len(cfg.seeds), f"--seeds {cfg.seeds} repeats a seed"),
        (cfg.epochs >= 1, f"--epochs {cfg.epochs} must be at least 1"),
        (cfg.lr > 0, f"--lr {cfg.lr} must be > 0"),
        (0 <= cfg.momentum < 1, f"--momentum {cfg.momentum} must be in [0, 1)"),
        (cfg.weight_decay >= 0, f"--weight-decay {cfg.weight_decay} must be >= 0"),
        (cfg.batch_size >= 1, f"--batch-size {cfg.batch_size} must be at least 1"),
        (cfg.points >= 2, f"--points {cfg.points} must be at least 2 (the end points)"),
        (cfg.split in SPLITS, f"unknown --split {cfg.split!r}; choose one of {', '.join(SPLITS)}"),
        (cfg.alpha > 0, f"--alpha {cfg.alpha} must be > 0"),
        (cfg.train_subset == 0 or cfg.train_subset >= 10 * cfg.models,
         f"--train-subset {cfg.train_subset} must be 0 (all) or at least {10 * cfg.models}"),
        (cfg.test_subset >= 0, f"--test-subset {cfg.test_subset} must be >= 0"),
        (cfg.granularity in ("weight", "neuron"), f"unknown --granularity {cfg.granularity!r}; use weight or neuron"),
        (cfg.bn_batches >= 0 and cfg.bn_batch_size >= 1, "--bn-batches must be >= 0 and --bn-batch-size >= 1"),
        (cfg.threads >= 0, f"--threads {cfg.threads} must be >= 0"),
        (cfg.device in ("auto", "cpu", "cuda"), f"unknown --device {cfg.device!r}; use auto, cpu or cuda"),
    ]
    for ok, message in checks:
        if not ok:
            return message
    if cfg.device == "cuda" and not torch.cuda.is_available():
        return "--device cuda but no CUDA device is available"
    return find_data_problem(cfg.dataset, cfg.data_root, False)


def main(argv: list[str] | None = None) -> int:
    args = vars(build_parser().parse_args(argv))
    out = Path(args.pop("out"))
    args["anchor_ratios"] = args.pop("anchor_ratio")
    cfg = LmcConfig(**args)
    problem = config_problem(cfg)
    if problem is None and out.exists() and not out.is_dir():
        problem = f"--out {out} exists and is not a folder"
    if problem:
        print(f"fedpfn.lmc: error: {problem}", file=sys.stderr)
        return 2
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    result = run_lmc(cfg, log=lambda line: print(line, flush=True))
    out.mkdir(parents=True, exist_ok=True)
    (out / "lmc.json").write_text(json.dumps(result, indent=1) + "\n")
    split = f"dirichlet({cfg.alpha:g})" if cfg.split == "dirichlet" else cfg.split
    plot_curves(result, out / "lmc.png", title=f"{cfg.dataset} {cfg.model} {split}")
    print(markdown_table(result))
    print(f"wrote {out / 'lmc.json'} and {out / 'lmc.png'} in {result['seconds']:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
