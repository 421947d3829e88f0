"""A model and a dataset of your own, by dotted path (docs/guide/data.md shows and explains it):

    fedpfn run --model mypkg.stripes:build --dataset mypkg.stripes:load --num-clients 4

`load` makes a small synthetic dataset (16 x 16 grey images of a stripe: horizontal, vertical or
diagonal, in noise); `build` a small CNN for it. Both meet the contract fedpfn checks.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from fedpfn.core.models import ZooModel


def load(data_root: str | None) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(train_x, train_y, test_x, test_y): x float32 (N, 1, 16, 16), y int64 in 0..2."""
    rng = np.random.default_rng(0)  # the same data on every machine and every Ray worker
    rows, cols = np.indices((16, 16))
    stripes = np.stack([rows % 8 < 2, cols % 8 < 2, (rows + cols) % 8 < 2]).astype(np.float32)

    def split(n: int) -> tuple[np.ndarray, np.ndarray]:
        y = rng.integers(0, 3, n)
        x = stripes[y] + rng.normal(0.0, 0.6, (n, 16, 16)).astype(np.float32)
        return x[:, None], y

    return (*split(2000), *split(500))


class SmallCNN(ZooModel):
    """conv8-pool-conv16-pool, then a Linear `classifier` (what anchoring options and MOON name)."""

    def __init__(self, input_shape: tuple[int, int, int], num_classes: int) -> None:
        super().__init__()
        channels, height, width = input_shape
        self.features = nn.Sequential(
            nn.Conv2d(channels, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
        )  # fmt: skip
        self.classifier = nn.Linear(16 * (height // 4) * (width // 4), num_classes)

    def represent(self, x: torch.Tensor) -> torch.Tensor:
        return self.features(x)


def build(input_shape: tuple[int, int, int], num_classes: int) -> ZooModel:
    return SmallCNN(input_shape, num_classes)
