"""Series with known shapes for the figures: a run's rows, lmc.json's arms."""

from __future__ import annotations

import math
import random

from fedpfn.analysis import fusion
from fedpfn.experiments import lmc_run

def rows(seed: int, rounds: int = 5) -> list[dict]:
    rng = random.Random(seed)
    return [{"round": r, "test_accuracy": 0.6 + 0.05 * r + rng.uniform(-0.02, 0.02), "test_loss": 1 / r,
             "train_loss": 1.1 / r} for r in range(1, rounds + 1)]  # fmt: skip


def lmc_result(seeds: int = 3) -> dict:
    """lmc.json's shape for plain and one anchored arm: plain dips 30 points, anchored 10."""
    config = {"lr": 0.05, "granularity": "weight", "measured_on": "union", "dataset": "fmnist", "model": "mlp",
              "models": 2, "epochs": 3, "split": "dirichlet", "alpha": 0.5, "start": "init"}  # fmt: skip
    result: dict = {"config": config, "settings": {}}
    for name, ratio, dip in (("plain", 0.0, 0.3), ("shared-0.4", 0.4, 0.1)):
        per_seed = []
        for seed in range(seeds):
            alphas = [i / 10 for i in range(11)]
            acc = [0.85 - dip * math.sin(math.pi * a) + 0.01 * seed * a for a in alphas]
            loss = [1 - v for v in acc]
            pair = {"models": [0, 1], "alpha": alphas, "acc": acc, "loss": loss, "matched_acc": acc, "matched_loss": loss}
            per_seed.append({"seed": seed, "pairs": [{**pair, **fusion.curve_barriers(pair)}]})
        curves = lmc_run.over_seeds([{**s, **{k: 0.0 for k in lmc_run.FIGURES}} for s in per_seed])
        result["settings"][name] = {"anchor_ratio": ratio, "seeds": per_seed, "summary": curves}
    return result
