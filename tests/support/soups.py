"""A tiny soup setting (an MLP on a learnable rule over 8 x 8 noise) and its fine-tuned ingredients."""

from __future__ import annotations

import torch

from fedpfn.analysis.fusion import EvalData, Probe, snapshot
from fedpfn.core.models import build_model
from fedpfn.core.training import OptimizerSpec
from fedpfn.experiments import soup_run

SHAPE = (1, 8, 8)


CLASSES = 3


def soup_data(n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(n, *SHAPE, generator=gen)
    return x, x.flatten(1)[:, :CLASSES].argmax(1)  # a learnable rule


def soup_seed_data(k: int = 3, seed: int = 0, model_seed: int = 0) -> soup_run.SeedData:
    torch.manual_seed(model_seed)
    model = build_model("mlp", SHAPE, CLASSES, width=16)
    grid = {"lr": (0.05, 0.02), "epochs": (1, 2), "augment": (False, True), "label_smoothing": (0.0, 0.1)}
    held, test = EvalData("held-out", *soup_data(60, 1)), EvalData("test", *soup_data(60, 2))
    recipes = soup_run.recipes(grid, k, seed)
    return soup_run.SeedData(
        seed, model, snapshot(model), torch.arange(96), held, test, recipes, Probe(model)
    )


def soup_tuned(setup: soup_run.SeedData, arm: str) -> tuple[list[dict], list]:
    masks = soup_run.masks_for(arm, setup.model, len(setup.recipes), setup.seed, 0.4, "weight")
    states = soup_run.fine_tune(setup, *soup_data(96, 3), masks, OptimizerSpec("sgd", 0.05, momentum=0.9), 16)
    return states, masks
