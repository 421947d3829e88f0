"""Anchor masks and the exact freeze: the behaviour FedPFN and FedPNU rest on."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from fedpfn.core.anchors import anchored_fraction, as_numpy, draw_mask
from fedpfn.core.models import build_model
from fedpfn.core.protocol import pack, unpack
from fedpfn.core.seeding import Stream, seed_for
from fedpfn.core.training import OptimizerSpec, freeze, minibatches, train_local


def _model(name: str = "cnn", seed: int = 0, shape=(1, 28, 28), classes: int = 10):
    torch.manual_seed(seed)
    return build_model(name, shape, classes)


@pytest.mark.parametrize("ratio", [0.2, 0.4, 0.6])
def test_weight_mask_fixes_close_to_ratio(ratio):
    mask = draw_mask(_model("cnn"), ratio, seed=1, granularity="weight")
    assert abs(anchored_fraction(mask) - ratio) < 0.01


def mask_seed(run_seed: int, server_round: int, schedule: str) -> int:
    return seed_for(run_seed, Stream.MASK, 0 if schedule == "fixed" else server_round)


@pytest.mark.parametrize("ratio", [0.2, 0.4, 0.6])
@pytest.mark.parametrize("name,shape", [("mlp", (1, 28, 28)), ("cnn", (1, 28, 28)), ("resnet20", (3, 32, 32))])
def test_neuron_mask_fixes_exactly_round_rho_n_neurons_of_every_layer(name, shape, ratio):
    model = _model(name, shape=shape)
    for seed in range(5):
        mask = draw_mask(model, ratio, seed=seed, granularity="neuron")
        for param_name, m in mask.items():
            rows = m.reshape(m.shape[0], -1).all(1) if m.dim() else m.reshape(1)
            assert int(rows.sum()) == round(ratio * len(rows)), (param_name, seed)
    classifier = [draw_mask(model, ratio, seed=s, granularity="neuron")["classifier.bias"] for s in range(5)]
    assert len({tuple(c.tolist()) for c in classifier}) > 1  # which neurons: seeded, not fixed


def test_neuron_mask_fixes_whole_neurons_close_to_ratio():
    model = _model("resnet20", shape=(3, 32, 32))
    mask = draw_mask(model, 0.4, seed=3, granularity="neuron")
    assert abs(anchored_fraction(mask) - 0.4) < 0.03
    for name, m in mask.items():
        rows = m.reshape(m.shape[0], -1) if m.dim() else m.reshape(1, 1)
        assert torch.equal(rows.all(1), rows.any(1)), f"{name}: a neuron is partly anchored"
    # a conv output channel carries its BatchNorm scale and shift with it
    assert torch.equal(mask["conv1.weight"][:, 0, 0, 0], mask["bn1.weight"])
    assert torch.equal(mask["bn1.weight"], mask["bn1.bias"])
    assert torch.equal(mask["classifier.weight"][:, 0], mask["classifier.bias"])


def test_scope_options_and_buffers():
    model = _model("resnet20", shape=(3, 32, 32))
    full = draw_mask(model, 0.4, seed=0)
    assert set(full) == {n for n, p in model.named_parameters()}
    assert not any("running" in n or "num_batches" in n for n in full)  # buffers never
    no_head = draw_mask(model, 0.4, seed=0, include_classifier=False)
    assert "classifier.weight" not in no_head and "conv1.weight" in no_head
    no_norm = draw_mask(model, 0.4, seed=0, include_norm=False)
    assert not any(n.startswith("bn") or ".bn" in n for n in no_norm)


def test_same_seed_same_mask_on_every_client_new_round_new_mask():
    seed_r1 = mask_seed(7, 1, "round")
    a = draw_mask(_model(seed=0), 0.4, seed_r1)
    b = draw_mask(_model(seed=99), 0.4, seed_r1)  # another client: other weights, same architecture
    assert all(torch.equal(a[n], b[n]) for n in a)
    c = draw_mask(_model(seed=0), 0.4, mask_seed(7, 2, "round"))
    assert not all(torch.equal(a[n], c[n]) for n in a)
    assert mask_seed(7, 1, "fixed") == mask_seed(7, 50, "fixed")


@pytest.mark.parametrize("ratio", [-0.1, 1.0])
def test_ratio_outside_range_refused(ratio):
    with pytest.raises(ValueError, match="anchor ratio"):
        draw_mask(_model(), ratio, seed=0)


@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
@pytest.mark.parametrize("granularity", ["weight", "neuron"])
def test_anchors_bit_identical_after_training(optimizer, granularity):
    model = _model("cnn")
    start = {n: p.detach().clone() for n, p in model.named_parameters()}
    mask = draw_mask(model, 0.4, seed=5, granularity=granularity)
    gen = torch.Generator().manual_seed(0)
    x, y = torch.randn(256, 1, 28, 28), torch.randint(0, 10, (256,))
    opt = OptimizerSpec(optimizer, lr=0.1, momentum=0.9, weight_decay=5e-3)
    train_local(model, x, y, minibatches(torch.arange(256), 32, 2, gen), opt, mask)
    for name, p in model.named_parameters():
        anchored = mask[name]
        assert torch.equal(p.detach()[anchored], start[name][anchored]), name
        assert not torch.equal(p.detach()[~anchored], start[name][~anchored]), name


def test_pack_unpack_round_trip_and_size():
    model = _model("cnn")
    mask = draw_mask(model, 0.4, seed=11, granularity="neuron")
    arrays = {n: t.detach().numpy().copy() for n, t in model.state_dict().items()}
    frozen = as_numpy(mask)
    packed = pack(arrays, frozen)
    kept = sum(v.size for v in packed.values())
    total = sum(v.size for v in arrays.values())
    assert kept < 0.8 * total
    rebuilt = unpack(packed, frozen, arrays)
    assert all(np.array_equal(rebuilt[n], arrays[n]) for n in arrays)
    updates = unpack(packed, frozen, None)  # an update record: zero where nothing trained
    assert all(not updates[n][frozen[n]].any() for n in frozen)



def test_freeze_is_exact_for_special_values():
    start = {"weight": torch.tensor([[-0.0, float("inf"), float("nan"), 1.0]] * 3)}
    mask = {"weight": torch.ones(3, 4, dtype=torch.bool)}
    mask["weight"][:, 3] = False
    frozen = freeze({"weight": torch.full((3, 4), 7.0)}, start, mask)
    as_bits = lambda t: t.view(torch.int32)  # noqa: E731  (NaN != NaN, bits are equal)
    assert torch.equal(as_bits(frozen["weight"][:, :3]), as_bits(start["weight"][:, :3]))
    assert torch.all(frozen["weight"][:, 3] == 7.0)
