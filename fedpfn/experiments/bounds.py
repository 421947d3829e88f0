"""What an analysis would hold in memory and how much it would compute, from its settings alone,
before anything is allocated or trained.

Every setting of `fedpfn align` has a range, but their product does not: 64 models of width
16,384 are 64 copies of 281 million parameters, and with every bound at its maximum the run
would train for longer than anyone waits. `lmc_problems` estimates the peak memory (the models
held at once, the data, weight matching's cost matrices) against what this machine has free,
and the floating-point work (training, curves, matching) against MAX_FLOPS, and refuses with
the estimate and the limit in one line. The estimates are upper-end approximations: a refusal
says "about".
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import torch
from torch import nn

from fedpfn.core.models import build_model
from fedpfn.core.settings import between
from fedpfn.core.training import free_memory

MAX_POINTS = 101  # a curve's points (lmc, soup); each is a full evaluation, so the count is bounded
MAX_FLOPS = 1e18  # about 28 hours at 10 TFLOP/s, a GPU's sustained rate; years on a CPU
FLOAT = 4  # bytes of a float32
SIZES = {  # (training images, test images, image shape) of each dataset
    "fmnist": (60_000, 10_000, (1, 28, 28)),
    "mnist": (60_000, 10_000, (1, 28, 28)),
    "cifar10": (50_000, 10_000, (3, 32, 32)),
    "cifar100": (50_000, 10_000, (3, 32, 32)),
    "svhn": (73_257, 26_032, (3, 32, 32)),
}


class Shape(NamedTuple):
    """What the estimates need of a model: its parameters, its widest layer, whether it has BatchNorm."""

    params: int
    widest: int
    batchnorm: bool


def meta_model(model: str, dataset: str, width: int = 0) -> nn.Module:
    """`model` for `dataset`, built on the meta device: nothing allocated, nothing initialised."""
    with torch.device("meta"):
        return build_model(model, SIZES[dataset][2], 100 if dataset == "cifar100" else 10, width=width)


def model_shape(model: str, dataset: str, width: int = 0) -> Shape:
    """What the estimates need of `model` for `dataset` (`meta_model`)."""
    built = meta_model(model, dataset, width)
    widest = max((p.shape[0] for p in built.parameters() if p.dim() > 1), default=1)
    batchnorm = any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in built.modules())
    return Shape(sum(p.numel() for p in built.parameters()), int(widest), batchnorm)


def odd_points(points: int) -> str | None:
    """An odd count, so that a = 0.5 (the midpoint) is on the grid, and at most MAX_POINTS."""
    reason = between(3, MAX_POINTS)(points)
    return reason or (None if points % 2 else f"{points} must be odd, so the midpoint a = 0.5 is measured")


def _gb(count: float) -> str:
    return f"{count / 1e9:.1f} GB"


def lmc_estimates(cfg: Any) -> dict[str, float]:
    """Peak bytes and floating-point operations of `fedpfn align` with the settings `cfg` (LmcConfig)."""
    params, widest, batchnorm = model_shape(cfg.model, cfg.dataset, cfg.width)
    train_n, test_n, shape = SIZES[cfg.dataset]
    pool = min(cfg.train_subset or train_n, train_n)
    k, seeds, arms = cfg.models, len(cfg.seeds), len(cfg.arms)
    starts = 1 + (k if "diff-init" in cfg.arms else 0)
    start_epochs = 0 if cfg.start == "init" else int(cfg.start.split(":")[1])
    models_held = seeds * (1 + starts) + 3 + 2 * k + 3  # every seed's starts; a training; K trained, matched
    data = (train_n + test_n) * math.prod(shape) * FLOAT
    memory = models_held * params * FLOAT + data + 2 * 8 * widest**2  # matching's cost matrices (float64)
    same = cfg.split == "same-data"
    train = 6 * params * seeds * (start_epochs * pool * starts + arms * cfg.epochs * pool * (k if same else 1))
    pairs = k * (k - 1) // 2
    held = cfg.held_out * pool * (1 if same else min(1.0, 2 / k))  # a pair's held-out samples (own, union)
    evaluated = (test_n if cfg.where == "test" else held) + (min(cfg.bn_batches * cfg.bn_batch_size, pool) if batchnorm else 0)
    matchers = len(cfg.matchers)
    curves = 2 * params * seeds * arms * pairs * (1 + matchers) * cfg.points * evaluated  # plain, each matcher's
    matching = seeds * arms * pairs * matchers * 2 * widest**3  # an assignment per layer, cubic in its width
    return {"memory": memory, "flops": train + curves + matching, "params": params}


def lmc_problems(cfg: Any) -> list[str]:
    """Why `fedpfn align` with the settings `cfg` would not fit this machine's memory or MAX_FLOPS:
    one line with each estimate beside its limit, or none."""
    found = lmc_estimates(cfg)
    free, where = free_memory(cfg.device)
    over = []
    if found["memory"] > free:
        over.append(f"hold about {_gb(found['memory'])} at once, more than the {_gb(free)} {where}")
    if found["flops"] > MAX_FLOPS:
        over.append(
            f"compute about {found['flops']:.1e} floating-point operations, more than the {MAX_FLOPS:.0e} "
            "an analysis may (about 28 hours at 10 TFLOP/s)"
        )
    if not over:
        return []
    return [
        f"models: {cfg.models} models of {found['params']:,} parameters would {' and '.join(over)}; use fewer "
        "--models, --seeds, --epochs or --points, or a smaller --width"
    ]
