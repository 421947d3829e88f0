"""Weight matching: a spec is right when a random permutation keeps every model's function, and
matching is right when it undoes that permutation exactly and aligns two different
initialisations (the positive control)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from fedpfn.analysis.fusion import average_states, interpolate_state, reset_bn_stats
from fedpfn.analysis.matching import (
    apply_permutation,
    identity_permutation,
    invert,
    moved_fraction,
    permutation_spec,
    random_permutation,
    weight_matching,
)
from fedpfn.core.data import find_data_problem, load_dataset
from fedpfn.core.models import build_model
from fedpfn.core.training import OptimizerSpec, evaluate, minibatches, train_local
from tests.support.models import scrambled_model, state_copy

needs_fmnist = pytest.mark.skipif(
    find_data_problem("fmnist", None, False) is not None, reason="Fashion-MNIST not installed"
)

# (model, input shape, build_model keywords): every model the project ships, the MLP at two widths
CASES = [
    ("mlp", (1, 8, 8), {}),
    ("mlp", (1, 8, 8), {"width": 24}),
    ("cnn", (1, 28, 28), {}),  # 64 x 3 x 3 flattened into fc: blocks of 9 inputs
    ("vgg11", (1, 28, 28), {}),
    ("resnet20", (1, 12, 12), {}),
    ("resnet20", (1, 12, 12), {"projection_head": 16}),
    ("cnn", (1, 28, 28), {"projection_head": 16}),
]


def _outputs(model: nn.Module, state: dict[str, torch.Tensor], x: torch.Tensor) -> torch.Tensor:
    model.load_state_dict(state)
    with torch.no_grad():
        return model(x)


@pytest.mark.parametrize(("name", "shape", "kwargs"), CASES, ids=lambda case: str(case))
def test_a_shuffle_keeps_the_function_and_matching_undoes_it(name, shape, kwargs) -> None:
    model = scrambled_model(name, shape, **kwargs)
    spec = permutation_spec(model)
    state = state_copy(model)
    shuffle = random_permutation(spec, torch.Generator().manual_seed(1))
    shuffled = apply_permutation(spec, shuffle, state)
    x = torch.randn(4, *shape, generator=torch.Generator().manual_seed(2))
    before, after = _outputs(model, state, x), _outputs(model, shuffled, x)
    # torch.allclose, not torch.testing.assert_close: that one imports torch.distributed (2 s)
    assert torch.allclose(after, before, atol=1e-5, rtol=1e-5), (after - before).abs().max()
    permuted = {key for key in state if not torch.equal(state[key], shuffled[key])}
    assert permuted == set(spec.by_key)  # every tensor the spec names moved, BN statistics included
    assert not any(key.endswith("num_batches_tracked") for key in permuted)
    assert moved_fraction(shuffle) > 0.5

    matched = weight_matching(spec, state, shuffled)
    assert all(torch.equal(matched[v], undo) for v, undo in invert(shuffle).items())
    restored = apply_permutation(spec, matched, shuffled)
    assert all(torch.equal(restored[key], state[key]) for key in state)  # bit for bit
    assert moved_fraction(matched) > 0.5

    itself = weight_matching(spec, state, state)
    assert all(torch.equal(itself[v], keep) for v, keep in identity_permutation(spec).items())
    assert moved_fraction(itself) == 0.0


def test_sizes_come_from_the_modules_and_unknown_models_are_refused() -> None:
    assert permutation_spec(build_model("mlp", (1, 8, 8), 10, width=24)).sizes == {
        "features.1": 24,
        "features.3": 24,
    }
    cnn = permutation_spec(build_model("cnn", (1, 28, 28), 10))
    assert sorted(site.block for _, site in cnn.by_key["fc.weight"]) == [1, 9]
    with pytest.raises(ValueError, match="unsupported model Sequential"):
        permutation_spec(nn.Sequential(nn.Linear(4, 4)))
    spec = permutation_spec(build_model("mlp", (1, 8, 8), 10))
    wrong = identity_permutation(spec) | {"features.1": torch.zeros(200, dtype=torch.long)}
    with pytest.raises(ValueError, match="features.1: not a permutation of 200 units"):
        apply_permutation(spec, wrong, build_model("mlp", (1, 8, 8), 10).state_dict())


def test_the_resnet_streams_follow_option_a_padding() -> None:
    """Half the new channels before the old ones, the rest after: the layout BasicBlock.forward pads to."""
    spec = permutation_spec(build_model("resnet20", (1, 12, 12), 10))
    where = {
        (variable.name, site.key): site.positions
        for variable in spec.variables
        for site in variable.sites
        if site.key.endswith("bn2.weight")
    }
    assert where["conv1", "layers.2.bn2.weight"] == tuple(range(16))
    assert where["conv1", "layers.5.bn2.weight"] == tuple(range(8, 24))
    assert where["conv1", "layers.8.bn2.weight"] == tuple(range(24, 40))
    assert where["layers.3.shortcut", "layers.5.bn2.weight"] == (*range(8), *range(24, 32))
    assert where["layers.3.shortcut", "layers.8.bn2.weight"] == (*range(16, 24), *range(40, 48))
    assert where["layers.6.shortcut", "layers.8.bn2.weight"] == (*range(16), *range(48, 64))
    assert spec.sizes["layers.4.conv1"] == 32  # each block's inner channels: a variable of its own


@pytest.fixture(scope="module")
def fmnist():
    return load_dataset("fmnist", None)


def _train(fmnist, name: str, x: torch.Tensor, seed: int, epochs: int) -> dict[str, torch.Tensor]:
    """`name` from torch seed `seed`, trained with SGD on (x, the first len(x) training labels)."""
    torch.manual_seed(seed)
    model = build_model(name, tuple(x.shape[1:]), 10)
    order = minibatches(torch.arange(len(x)), 50, epochs, torch.Generator().manual_seed(seed))
    train_local(model, x, fmnist.train_y[: len(x)], order, OptimizerSpec("sgd", 0.05, momentum=0.9))
    return state_copy(model)


@pytest.fixture(scope="module")
def two_mlps(fmnist) -> list[dict[str, torch.Tensor]]:
    """Two different initialisations trained on the same 3,000 Fashion-MNIST samples."""
    return [_train(fmnist, "mlp", fmnist.train_x[:3000], seed, epochs=2) for seed in (0, 1)]


def _loss(
    model: nn.Module, state, x: torch.Tensor, y: torch.Tensor, bn_x: torch.Tensor | None = None
) -> float:
    """Test loss; BN models first get statistics recomputed on `bn_x` (averaged weights need their own)."""
    model.load_state_dict(state)
    if bn_x is not None:
        reset_bn_stats(model, bn_x, list(torch.arange(len(bn_x)).split(100)))
    return evaluate(model, x, y)[0]


@needs_fmnist
def test_the_raw_midpoint_with_a_shuffled_copy_is_poor_and_the_matched_one_is_the_model(
    fmnist, two_mlps
) -> None:
    model = build_model("mlp", fmnist.input_shape, 10)
    spec, state = permutation_spec(model), two_mlps[0]
    shuffled = apply_permutation(spec, random_permutation(spec, torch.Generator().manual_seed(3)), state)
    matched = apply_permutation(spec, weight_matching(spec, state, shuffled), shuffled)
    x, y = fmnist.test_x[:500], fmnist.test_y[:500]
    own = _loss(model, state, x, y)
    assert _loss(model, interpolate_state(state, shuffled, 0.5), x, y) > own + 0.5
    assert _loss(model, interpolate_state(state, matched, 0.5), x, y) == own


@needs_fmnist
def test_the_matched_midpoint_of_a_batchnorm_resnet_is_the_model(fmnist) -> None:
    """ResNet-20 (BN, residual streams) on 7 x 7 pooled Fashion-MNIST, a few steps trained."""
    train_x, test_x = F.avg_pool2d(fmnist.train_x[:600], 4), F.avg_pool2d(fmnist.test_x[:300], 4)
    model = build_model("resnet20", tuple(train_x.shape[1:]), 10)
    state = _train(fmnist, "resnet20", train_x, seed=0, epochs=1)
    spec = permutation_spec(model)
    shuffled = apply_permutation(spec, random_permutation(spec, torch.Generator().manual_seed(3)), state)
    matched = apply_permutation(spec, weight_matching(spec, state, shuffled), shuffled)
    y = fmnist.test_y[:300]
    own = _loss(model, state, test_x, y, train_x)
    assert _loss(model, interpolate_state(state, shuffled, 0.5), test_x, y, train_x) > own + 0.3
    assert _loss(model, interpolate_state(state, matched, 0.5), test_x, y, train_x) == own


@needs_fmnist
def test_matching_aligns_two_initialisations_trained_on_the_same_data(fmnist, two_mlps) -> None:
    """The positive control: the plain average of two inits is worse than either; matched, it is not."""
    model = build_model("mlp", fmnist.input_shape, 10)
    spec = permutation_spec(model)
    perms = weight_matching(spec, *two_mlps)
    assert moved_fraction(perms) > 0.5
    x, y = fmnist.test_x[:500], fmnist.test_y[:500]
    ends = [_loss(model, state, x, y) for state in two_mlps]
    plain = _loss(model, average_states(two_mlps), x, y)
    aligned = _loss(model, average_states([two_mlps[0], apply_permutation(spec, perms, two_mlps[1])]), x, y)
    assert plain > max(ends) + 0.3
    assert aligned < plain - 0.3
