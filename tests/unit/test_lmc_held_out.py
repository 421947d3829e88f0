"""`fedpfn align --where test` measures on the test set and holds nothing out of the models'
training data (it once refused --held-out as unused yet still removed 20 % of each shard)."""

from __future__ import annotations

import torch

from fedpfn.analysis import fusion
from fedpfn.experiments import lmc

SHAPE, CLASSES = (1, 4, 4), 3


def _trained_on(where: str) -> int:
    """How many samples the seed's models train on, all shards together."""
    x = torch.randn(200, *SHAPE, generator=torch.Generator().manual_seed(0))
    y = torch.arange(200) % CLASSES
    test = fusion.EvalData("test", x[:10], y[:10])
    cfg = lmc.LmcConfig(where=where, split="same-data", epochs=1, bn_batches=0, seeds=(0,))
    setup = lmc.setup_seed(cfg, (x, y), test, SHAPE, CLASSES, seed=0)
    return sum(len(idx) for idx in setup.indices)


def test_where_test_holds_nothing_out_and_own_data_holds_out_its_share():
    assert _trained_on("test") == 2 * 200  # two models, each on every sample (same data)
    assert _trained_on("union") == 2 * 160  # 20 % of each held out for its own figures
