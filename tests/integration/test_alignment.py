"""The alignment of a round's client models, measured while the federation trains (alignment_every)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from fedpfn.analysis.matching import apply_permutation, permutation_spec, random_permutation
from fedpfn.core.cache import dataset_on, initial_model
from fedpfn.core.files import METRICS, read_jsonl
from fedpfn.core.training import OptimizerSpec, minibatches, train_local
from fedpfn.runtime.alignment import AlignmentProbe, retained_fraction
from fedpfn.runtime.simulation import simulate
from tests.support.config import tiny_config


def probe_for(cfg):
    data = dataset_on(cfg, torch.device("cpu"))
    return AlignmentProbe(cfg, torch.device("cpu"), data.test_x, data.test_y)


def state(net) -> dict[str, np.ndarray]:
    return {k: v.detach().numpy().copy() for k, v in net.state_dict().items()}


def test_one_model_twice_has_no_barrier_and_no_fusion_gap():
    cfg = tiny_config(model="resnet20", alignment_every=1, alignment_clients=2, alignment_samples=50)  # BatchNorm: statistics recomputed
    model = state(initial_model(cfg))
    figures = probe_for(cfg).measure(model, model, [model] * 2, [0, 1], [10, 10])
    assert figures["align_loss_barrier"] == 0 and figures["align_loss_midpoint"] == 0
    assert figures["align_permutation_loss"] == 0 and figures["align_moved_fraction"] == 0
    assert figures["align_fusion_gap"] == 0 and figures["align_clients"] == 2
    assert figures["align_measured_on"] == "evaluation subset" and "align_retained_fraction" not in figures


def _trained_and_shuffled(cfg) -> tuple[dict, dict]:
    """An MLP trained a little, and the same function with its first hidden layer's units shuffled."""
    a, b = initial_model(cfg), initial_model(cfg)
    data = dataset_on(cfg, torch.device("cpu"))
    batches = minibatches(torch.arange(3200), 64, 1, torch.Generator().manual_seed(0))
    train_local(a, data.train_x, data.train_y, batches, OptimizerSpec("sgd", 0.05, momentum=0.9))
    with torch.no_grad():
        perm = torch.randperm(200, generator=torch.Generator().manual_seed(0))
        b.features[1].weight.copy_(a.features[1].weight[perm])
        b.features[1].bias.copy_(a.features[1].bias[perm])
        b.features[3].weight.copy_(a.features[3].weight[:, perm])
        for name in ("features.3.bias", "classifier.weight", "classifier.bias"):
            b.get_parameter(name).copy_(a.get_parameter(name))
    return state(a), state(b)


def test_a_permuted_copy_has_a_barrier_that_matching_removes():
    cfg = tiny_config(alignment_every=1, alignment_clients=2, alignment_samples=500)
    a, b = _trained_and_shuffled(cfg)
    figures = probe_for(cfg).measure(a, a, [a, b], [0, 1], [10, 10])
    same = probe_for(cfg).measure(a, a, [a, a], [0, 1], [10, 10])
    # the same function in another permutation: equal ends, a barrier, and P explains it
    assert figures["align_mean_client_acc"] == same["align_mean_client_acc"]
    assert figures["align_loss_barrier"] > 0.1 and figures["align_permutation_loss"] > 0.1
    assert figures["align_moved_fraction"] > 0.3
    assert abs(figures["align_fusion_gap"] - (figures["align_mean_client_acc"] - figures["align_fused_acc"])) < 1e-12


def test_retained_fraction_reads_one_zero_and_below_zero():
    """R = kept share of the local gains: the aggregate at the clients' own models, at the start, or worse."""
    start, own, examples = [2.0, 3.0], [1.0, 1.0], [10, 30]
    assert retained_fraction(start, own, own, examples) == 1.0
    assert retained_fraction(start, start, own, examples) == 0.0
    assert retained_fraction(start, [2.5, 3.5], own, examples) == (10 * -0.5 + 30 * -0.5) / (10 * 1 + 30 * 2)
    assert retained_fraction(start, [1.5, 2.0], own, examples) == (10 * 0.5 + 30 * 1.0) / 70
    assert retained_fraction(start, own, start, examples) is None  # no local gain: undefined, not 0


def test_retained_fraction_on_each_clients_held_out_data():
    cfg = tiny_config(alignment_every=1, local_test_fraction=0.2, alignment_clients=2)
    a, b = _trained_and_shuffled(cfg)
    start = state(initial_model(cfg))
    probe = probe_for(cfg)
    kept = probe.measure(start, a, [a, a], [0, 1], [5, 5])
    assert kept["align_retained_fraction"] == 1.0 and kept["align_measured_on"] == "union of held-out"
    none = probe.measure(start, start, [a, a], [0, 1], [5, 5])
    assert none["align_retained_fraction"] == 0.0
    mixed = probe.measure(start, {k: (a[k] + b[k]) / 2 for k in a}, [a, b], [0, 1], [5, 5])
    assert 0 < mixed["align_retained_fraction"] < 0.95  # the average of two permutations loses part of the gain


def test_a_batched_run_measures_the_rounds_due_with_a_mean_based_server(tmp_path):
    """FedAvg lets the batched engine answer with totals; a measured round gets the arrays anyway."""
    cfg = tiny_config(engine="batched", rounds=2, alignment_every=2, alignment_clients=2, alignment_samples=300,
                      out=str(tmp_path / "run"))
    simulate(cfg, show_progress=False)
    rows = read_jsonl(tmp_path / "run" / METRICS)
    assert not any(k.startswith("align_") for k in rows[0])
    assert rows[1]["align_clients"] == 2 and rows[1]["align_measured_on"] == "evaluation subset"
    assert rows[1]["align_moved_fraction"] >= 0 and "align_retained_fraction" not in rows[1]
    assert 0 < rows[1]["align_mean_client_acc"] <= 1
    assert rows[1]["align_client_partitions"] == sorted(rows[1]["clients"]) and rows[1]["align_client_reference"] == "aggregate"
    assert len(rows[1]["align_client_permutation_loss_full"]) == 2 and rows[1]["align_client_seconds"] > 0
    assert len(rows[1]["align_client_permutation_loss_changes"]) == 2


def test_the_client_models_of_a_round_are_whole_after_it_aggregated():
    """`--alignment-every` measures after aggregation, when FedPNU's replies are already unpacked in
    place: unpacking them again raised a traceback (`fedpfn run --algorithm fedpnu --alignment-every 1`)."""
    from flwr.app import ArrayRecord

    from tests.support.rounds import client_replies
    from fedpfn.runtime.algorithms import build_strategy

    cfg = tiny_config(algorithm="fedpnu", alignment_every=1, alignment_clients=2)
    model = initial_model(cfg)
    strategy = build_strategy(cfg, model)
    replies = client_replies(cfg, strategy, ArrayRecord(model.state_dict()), 1)
    before = strategy.client_models(1, replies)  # the replies as received
    strategy.aggregate_train(1, replies)
    after = strategy.client_models(1, replies)
    assert [sorted(m) for m in after] == [sorted(model.state_dict())] * len(replies)
    assert all(np.array_equal(a[k], b[k]) for a, b in zip(before, after, strict=True) for k in a)


def _client_figures(cfg, start, fused, clients):
    """Every client against the aggregate, on the probe's evaluation subset: matcher -> figure -> per client."""
    probe = probe_for(cfg)
    as_state = lambda arrays: {k: torch.from_numpy(v) for k, v in arrays.items()}  # noqa: E731
    figures = probe.against_aggregate(as_state(start), as_state(fused), [as_state(c) for c in clients], [3, 1],
                                      [probe.test])  # fmt: skip
    assert figures["client_reference"] == "aggregate" and figures["client_partitions"] == [3, 1]
    assert figures["client_seconds"] > 0
    by_matcher = {m: {k.removeprefix("client_").removesuffix(f"_{m}"): v for k, v in figures.items() if k.endswith(f"_{m}")}
                  for m in ("full", "changes")}  # fmt: skip
    return figures["client_distance"], by_matcher


@pytest.mark.parametrize("model", ["mlp", "cnn"])
def test_clients_identical_to_the_aggregate_read_no_permutation(model):
    cfg = tiny_config(model=model, alignment_every=1, alignment_clients=2, alignment_samples=64)
    start, fused = state(initial_model(cfg)), state(initial_model(tiny_config(model=model, seed=1)))
    distances, by_matcher = _client_figures(cfg, start, fused, [fused, fused])
    assert distances == [0.0, 0.0]
    for figures in by_matcher.values():
        assert figures["permutation_loss"] == [0.0, 0.0] and figures["moved_fraction"] == [0.0, 0.0]
        assert figures["matched_distance"] == [0.0, 0.0] and figures["converged"] == [True, True]


@pytest.mark.parametrize("model", ["mlp", "cnn"])
def test_a_client_that_is_a_permuted_copy_of_the_aggregate_is_moved_and_undone(model):
    """The same function with its units shuffled: far from the aggregate, P > 0, and matching puts it back,
    on the full weights and on the changes from a start that every permutation leaves as it is."""
    cfg = tiny_config(model=model, alignment_every=1, alignment_clients=2, alignment_samples=200)
    net, data = initial_model(cfg), dataset_on(cfg, torch.device("cpu"))
    batches = minibatches(torch.arange(1280), 64, 1, torch.Generator().manual_seed(0))
    train_local(net, data.train_x, data.train_y, batches, OptimizerSpec("sgd", 0.05, momentum=0.9))
    spec = permutation_spec(net)
    fused = state(net)
    start = {k: np.full_like(v, 0.01) for k, v in fused.items()}  # constant per tensor: w0 = pi(w0)
    shuffled = apply_permutation(spec, random_permutation(spec, torch.Generator().manual_seed(1)),
                                 {k: torch.from_numpy(v) for k, v in fused.items()})  # fmt: skip
    distances, by_matcher = _client_figures(cfg, start, fused, [fused, {k: v.numpy() for k, v in shuffled.items()}])
    assert distances[0] == 0.0 and distances[1] > 1.0
    for figures in by_matcher.values():
        assert figures["permutation_loss"][0] == 0.0 and figures["permutation_loss"][1] > 0
        assert figures["moved_fraction"][1] > 0.5
        assert figures["matched_distance"][1] < 1e-5  # undone: the matched client is the aggregate again
        assert abs(figures["matched_loss_barrier"][1]) < 1e-5


@pytest.mark.parametrize("model", ["mlp", "cnn"])
def test_a_round_whose_models_diverged_is_recorded_as_such_and_measures_nothing(model):
    """NaN weights (a federation at too large a step) are not readings: the round says it diverged and the
    run goes on, where matching them stopped the run with a bare ValueError; finite models are measured."""
    cfg = tiny_config(model=model, alignment_every=1, alignment_clients=2, alignment_samples=64)
    start = state(initial_model(cfg))
    other = state(initial_model(tiny_config(model=model, seed=1)))
    broken = {k: np.full_like(v, np.nan) if v.dtype.kind == "f" else v for k, v in other.items()}
    assert probe_for(cfg).measure(start, start, [start, broken], [0, 1], [10, 10]) == {"align_diverged": True}
    finite = probe_for(cfg).measure(start, start, [start, other], [0, 1], [10, 10])
    assert "align_diverged" not in finite and finite["align_client_distance"][0] == 0.0


def test_a_run_that_diverges_goes_to_its_end_and_its_measured_round_says_so(tmp_path):
    cfg = tiny_config(engine="batched", rounds=2, alignment_every=2, alignment_clients=2, alignment_samples=300,
                      lr=1e6, out=str(tmp_path / "run"))  # fmt: skip
    simulate(cfg, show_progress=False)
    rows = read_jsonl(tmp_path / "run" / METRICS)
    assert len(rows) == 2 and rows[1]["align_diverged"] is True and "align_permutation_loss" not in rows[1]
