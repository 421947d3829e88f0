"""The alignment of a round's client models, measured while the federation trains (alignment_every)."""

from __future__ import annotations

import numpy as np
import torch

from conftest import tiny_config
from fedpfn.core.cache import dataset_on, initial_model
from fedpfn.core.files import METRICS, read_jsonl
from fedpfn.core.training import OptimizerSpec, minibatches, train_local
from fedpfn.runtime.alignment import AlignmentProbe
from fedpfn.runtime.simulation import simulate


def probe_for(cfg):
    data = dataset_on(cfg, torch.device("cpu"))
    return AlignmentProbe(cfg, torch.device("cpu"), data.test_x, data.test_y)


def state(net) -> dict[str, np.ndarray]:
    return {k: v.detach().numpy().copy() for k, v in net.state_dict().items()}


def test_one_model_twice_has_no_barrier_and_no_fusion_gap():
    cfg = tiny_config(model="resnet20", alignment_every=1, alignment_samples=200)  # BatchNorm: statistics recomputed
    figures = probe_for(cfg).measure([state(initial_model(cfg))] * 2)
    assert figures["align_loss_barrier"] == 0 and figures["align_acc_barrier"] == 0
    assert figures["align_fusion_gap"] == 0 and figures["align_clients"] == 2


def test_two_unrelated_models_have_a_barrier():
    cfg = tiny_config(alignment_every=1, alignment_samples=500)
    a, b = initial_model(cfg), initial_model(cfg)
    data = dataset_on(cfg, torch.device("cpu"))
    batches = minibatches(torch.arange(3200), 64, 1, torch.Generator().manual_seed(0))
    train_local(a, data.train_x, data.train_y, batches, OptimizerSpec("sgd", 0.05, momentum=0.9))
    with torch.no_grad():  # b: the same function as a, its first layer's units permuted
        perm = torch.randperm(200, generator=torch.Generator().manual_seed(0))
        b.features[1].weight.copy_(a.features[1].weight[perm])
        b.features[1].bias.copy_(a.features[1].bias[perm])
        b.features[3].weight.copy_(a.features[3].weight[:, perm])
        for name in ("features.3.bias", "classifier.weight", "classifier.bias"):
            b.get_parameter(name).copy_(a.get_parameter(name))
    figures = probe_for(cfg).measure([state(a), state(b)])
    # the same function, in another permutation: equal ends, a barrier between them
    assert figures["align_mean_client_acc"] == probe_for(cfg).measure([state(a), state(a)])["align_mean_client_acc"]
    assert figures["align_loss_barrier"] > 0
    assert abs(figures["align_fusion_gap"] - (figures["align_mean_client_acc"] - figures["align_fused_acc"])) < 1e-12


def test_a_batched_run_measures_the_rounds_due_with_a_mean_based_server(tmp_path):
    """FedAvg lets the batched engine answer with totals; a measured round gets the arrays anyway."""
    cfg = tiny_config(engine="batched", rounds=2, alignment_every=2, alignment_clients=2, alignment_samples=300,
                      out=str(tmp_path / "run"))
    simulate(cfg, show_progress=False)
    rows = read_jsonl(tmp_path / "run" / METRICS)
    assert not any(k.startswith("align_") for k in rows[0])
    assert rows[1]["align_clients"] == 2 and rows[1]["align_loss_barrier"] >= 0
    assert 0 < rows[1]["align_mean_client_acc"] <= 1
