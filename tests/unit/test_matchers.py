"""The matchers (fedpfn.analysis.matchers): an instrument is trusted only when shown to move.

For every matcher and every model family permspec supports: a model with itself gives P = 0
and moves no unit (the zero case); a randomly permuted copy is undone exactly, and P is then
the whole barrier (the moving case). The masked matcher moves units where anchors pin full
matching to the identity; the changes matcher refuses models with no common start; activation
matching refuses, by name, a model whose units it cannot see. No training: tiny random models.
"""

from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn

from fedpfn.analysis import fusion, matchers
from fedpfn.analysis.matching import apply_permutation, invert, moved_fraction, permutation_spec, random_permutation
from fedpfn.core.models import TimmViT
from tests.support.models import scrambled_model, state_copy

pytestmark = pytest.mark.usefixtures("one_torch_thread")

# every model family permspec supports, at tiny sizes (ResNet-20: BatchNorm and residual streams)
CASES = [
    ("mlp", (1, 8, 8), {"width": 16}),
    ("cnn", (1, 18, 18), {}),  # a conv map flattened into fc
    ("resnet20", (1, 12, 12), {}),
    ("cnn", (1, 18, 18), {"projection_head": 8}),
]


def _symmetric_start(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """A start every permutation leaves as it is (each tensor one value), so that a permuted copy of
    a model has the same start: its changes are the model's changes, permuted."""
    return {k: torch.full_like(v, float(v.float().mean())) if v.is_floating_point() else v for k, v in state.items()}


def _setting(name: str, shape: tuple, kwargs: dict):
    """A random model, its state, a shuffled copy, the shuffle, a probe and data labelled by the model
    itself (so that it is good at them and a misaligned average is not)."""
    model = scrambled_model(name, shape, **kwargs)
    spec, state = permutation_spec(model), state_copy(model)
    shuffle = random_permutation(spec, torch.Generator().manual_seed(1))
    x = torch.randn(96, *shape, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        y = model(x).argmax(1)
    return model, state, apply_permutation(spec, shuffle, state), shuffle, fusion.Probe(model), [fusion.EvalData("x", x, y)]


@pytest.mark.parametrize(("name", "shape", "kwargs"), CASES, ids=lambda case: str(case))
def test_every_matcher_leaves_a_model_with_itself_and_undoes_a_shuffle(name, shape, kwargs) -> None:
    model, state, shuffled, shuffle, probe, data = _setting(name, shape, kwargs)
    w0 = _symmetric_start(state)
    plain = fusion.interpolation_curve(probe, state, shuffled, data, points=3)
    barrier = fusion.curve_barriers(plain)["loss_barrier"]
    assert abs(barrier) > 1e-2  # the shuffle costs something, so P = barrier below cannot be 0 = 0
    itself = probe.measure(state, data)[0]
    for matcher in matchers.MATCHERS:
        zero = fusion.matched_pair(probe, state, state, data, 3, itself, matcher, w0)
        assert zero["permutation_loss"] == 0.0 and zero["moved_fraction"] == 0.0, matcher
        assert zero["matched_distance"] == 0.0, matcher
        found = matchers.match(matcher, model, state, shuffled, w0=w0, inputs=data[0].x)
        assert all(torch.equal(found.perms[v], undo) for v, undo in invert(shuffle).items()), matcher
        moving = fusion.matched_pair(probe, state, shuffled, data, 3, plain["loss"][1], matcher, w0)
        assert moving["moved_fraction"] == moved_fraction(shuffle) > 0.9, matcher
        assert moving["permutation_loss"] == pytest.approx(barrier, abs=1e-5), matcher
        assert moving["matched_loss_barrier"] == pytest.approx(0.0, abs=1e-5), matcher
        assert moving["matched_distance"] == 0.0 < fusion.parameter_distance(model, state, shuffled), matcher
        assert (found.converged, "converged" in moving) == ((None, False) if matcher == "activation" else (True, True))


def _anchored_pair(seed: int = 0):
    """Two MLPs with 40 % of their coordinates identical (large, as anchors held at their start can be)
    and the rest one model's, permuted in the other."""
    model = scrambled_model("mlp", (1, 8, 8), seed=seed, width=16)
    spec, state = permutation_spec(model), state_copy(model)
    shuffle = random_permutation(spec, torch.Generator().manual_seed(seed + 1))
    shuffled = apply_permutation(spec, shuffle, state)
    generator = torch.Generator().manual_seed(seed + 2)
    a, b = {}, {}
    for key, value in state.items():
        anchored = torch.rand(value.shape, generator=generator) < 0.4
        a[key] = torch.where(anchored, 3 * value, value) if value.is_floating_point() else value
        b[key] = torch.where(anchored, 3 * value, shuffled[key]) if value.is_floating_point() else value
    return model, a, b, shuffle


@pytest.mark.parametrize("seed", [0, 1])
def test_the_masked_matcher_moves_units_where_anchors_pin_full_matching_to_the_identity(seed: int) -> None:
    model, a, b, shuffle = _anchored_pair(seed)
    floats = [k for k in a if a[k].is_floating_point()]
    same = sum(int((a[k] == b[k]).sum()) for k in floats) / sum(a[k].numel() for k in floats)
    assert 0.35 < same < 0.5
    full = matchers.match("full", model, a, b)
    masked = matchers.match("masked", model, a, b)
    assert full.moved_fraction == 0.0 and full.converged
    assert masked.moved_fraction > 0.8 and masked.converged
    assert all(torch.equal(masked.perms[v], undo) for v, undo in invert(shuffle).items())


def test_the_changes_matcher_refuses_models_with_no_common_start() -> None:
    model, state, shuffled, *_ = _setting("mlp", (1, 8, 8), {"width": 16})
    with pytest.raises(matchers.MatcherRefused) as refused:
        matchers.match("changes", model, state, shuffled)
    assert str(refused.value) == matchers.NO_START and "\n" not in matchers.NO_START
    probe = fusion.Probe(model)
    data = [fusion.EvalData("x", torch.randn(8, 1, 8, 8), torch.zeros(8, dtype=torch.long))]
    assert fusion.matched_pair(probe, state, shuffled, data, 3, 0.0, "changes") == {"omitted": matchers.NO_START}
    other_shape = {k: v[:1] for k, v in state.items()}
    with pytest.raises(matchers.MatcherRefused, match="changes: the start w0 differs from the models at"):
        matchers.match("changes", model, state, shuffled, w0=other_shape)


def test_matchers_refuse_in_one_line_what_they_cannot_match() -> None:
    class StandIn(nn.Module):  # a transformer's place in TimmViT, without building timm's
        def __init__(self) -> None:
            super().__init__()
            self.head = nn.Linear(4, 3)

    vit = TimmViT(StandIn())
    for matcher in matchers.MATCHERS:
        reason = matchers.refusal(matcher, vit, w0={}, inputs=torch.zeros(4, 4))
        assert reason is not None and "unsupported model TimmViT" in reason and reason.startswith(matcher)
    mlp = scrambled_model("mlp", (1, 8, 8), width=16)
    assert matchers.refusal("activation", mlp) == (
        "activation: needs held-out inputs (at least 2) to correlate the units' activations on"
    )
    assert matchers.refusal("nearest", mlp) == "matcher 'nearest' is not one of full, masked, changes, activation"
    with pytest.raises(matchers.MatcherRefused, match="matchers: unknown nearest; choose from full, masked"):
        matchers.matcher_names("full,nearest")
    assert matchers.matcher_names("full,activation") == ("full", "activation")


def test_weight_matching_stopped_at_max_iter_says_it_did_not_converge() -> None:
    model, state, shuffled, *_ = _setting("mlp", (1, 8, 8), {"width": 16})
    with pytest.warns(RuntimeWarning, match="stopped at max_iter sweeps without converging"):
        stopped = matchers.match("full", model, state, shuffled, max_iter=1)
    assert (stopped.converged, stopped.sweeps) == (False, 1)
    assert stopped.diagnostics()["warning"] == matchers.NOT_CONVERGED
    with warnings.catch_warnings(record=True) as shown:
        warnings.simplefilter("default")  # Python's own default for RuntimeWarning: once per place
        for _ in range(3):  # every pair of a run stopped: printed once, recorded in each
            assert matchers.match("full", model, state, shuffled, max_iter=1).converged is False
    assert len(shown) == 1
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a converged descent warns nothing
        done = matchers.match("full", model, state, shuffled)
    assert (done.converged, done.sweeps) == (True, 2) and "warning" not in done.diagnostics()


def test_analyse_reports_each_matcher_by_name_and_full_at_the_top() -> None:
    model, state, shuffled, _, probe, data = _setting("mlp", (1, 8, 8), {"width": 16})
    scope = fusion.Scope("test", test=data[0])
    result = fusion.analyse(probe, [state, shuffled], scope, points=3, matchers=matchers.MATCHERS)
    assert list(result["matchers"]) == list(matchers.MATCHERS)
    assert result["matchers"]["changes"] == {"omitted": matchers.NO_START}  # no w0 given: no common start
    full = result["matchers"]["full"]
    assert {k: result[k] for k in matchers.FIGURES} == {k: full[k] for k in matchers.FIGURES}
    assert full["converged"] is True and full["permutation_loss"] > 0.01
    assert result["matchers"]["activation"]["permutation_loss"] == pytest.approx(full["permutation_loss"])
    with pytest.raises(ValueError, match="matchers=activation: full is required"):
        fusion.analyse(probe, [state, shuffled], scope, points=3, matchers=("activation",))
