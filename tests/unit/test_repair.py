"""What stands beside a fused model and a barrier (fedpfn.analysis.fusion, fedpfn.analysis.repair):
the ensemble, the REPAIRed curve, the training-data curve and ||A - B||. Each is shown to read 0
(or the model itself) where it must, and to move where it must."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from fedpfn.analysis import fusion, repair
from fedpfn.core.training import OptimizerSpec, minibatches, train_local
from fedpfn.experiments import lmc_run

CLASSES = 3
SHAPES = {"mlp": (1, 4, 4), "cnn": (1, 18, 18), "resnet20": (1, 8, 8)}
ZERO_WHEN_IDENTICAL = (
    "loss_barrier", "loss_midpoint", "acc_barrier", "acc_midpoint", "train_loss_barrier",
    "train_loss_midpoint", "train_acc_barrier", "train_acc_midpoint", "repair_loss_barrier",
    "repair_loss_midpoint", "repair_acc_barrier", "repair_acc_midpoint", "distance",
)  # fmt: skip

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _data(shape: tuple[int, int, int], n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Noise with a brighter band of columns: the class says which of CLASSES bands (MLP and CNN learn it)."""
    gen = torch.Generator().manual_seed(seed)
    y = torch.randint(0, CLASSES, (n,), generator=gen)
    band = torch.arange(shape[2]) * CLASSES // shape[2]  # each column's band
    return torch.randn(n, *shape, generator=gen) + 0.5 * (band == y[:, None]).float()[:, None, None, :], y


def _trained(name: str, which: int, epochs: int = 3) -> tuple[nn.Module, dict[str, torch.Tensor]]:
    """Model `name` from initialisation `which`, trained a little on the synthetic rule."""
    shape = SHAPES[name]
    width = 16 if name == "mlp" else 0
    model, _ = lmc_run.initial_model(name, shape, CLASSES, 0, torch.device("cpu"), width=width, which=which)
    x, y = _data(shape, 256, 0)
    batches = minibatches(torch.arange(256), 32, epochs, torch.Generator().manual_seed(which))
    train_local(model, x, y, batches, OptimizerSpec("sgd", 0.05, momentum=0.9))
    return model, fusion.snapshot(model)


def _probe(name: str, model: nn.Module) -> fusion.Probe:
    x, _ = _data(SHAPES[name], 256, 0)  # the training inputs: REPAIR's (or BatchNorm's) fixed batches
    return fusion.Probe(model, x, tuple(torch.arange(256).split(64)))


def _scope(name: str) -> fusion.Scope:
    held = fusion.EvalData("held-out", *_data(SHAPES[name], 128, 1))
    train = fusion.EvalData("training subset", *[t[:128] for t in _data(SHAPES[name], 256, 0)])
    return fusion.Scope("union", held_out=(held, held), train=(train, train))


@pytest.fixture(scope="module", params=["mlp", "cnn"])
def two_inits(request) -> dict:
    """Two models of one architecture from different initialisations, trained on the same data."""
    name = request.param
    model, a = _trained(name, which=1)
    _, b = _trained(name, which=2)
    return {"name": name, "model": model, "a": a, "b": b, "probe": _probe(name, model), "scope": _scope(name)}


# --------------------------------------------------------------------------- zero where it must be


@pytest.mark.parametrize("name", ["mlp", "cnn", "resnet20"])
def test_identical_models_read_zero_and_their_ensemble_and_fusion_are_the_model(name: str) -> None:
    model, a = _trained(name, which=1, epochs=1)
    probe, scope = _probe(name, model), _scope(name)
    result = fusion.analyse(probe, [a, a], scope, points=5, match="none")
    own_loss, own_acc = probe.measure(a, scope.data_for([0]))
    assert result["fused_acc"] == result["ensemble_acc"] == own_acc and result["ensemble_gap"] == 0
    assert result["ensemble_loss"] == pytest.approx(own_loss, abs=1e-6)  # float64 mean of two equal logits
    present = [key for key in ZERO_WHEN_IDENTICAL if key in result]
    assert all(result[k] == pytest.approx(0.0, abs=1e-6) for k in present), {k: result[k] for k in present}
    assert result["distance"] == 0.0 and "train_loss_barrier" in result
    if name == "resnet20":  # BatchNorm: its statistics reset is REPAIR's role, said, not computed twice
        assert "repair_loss_barrier" not in result and "BatchNorm" in result["repair"]
        assert "reset_bn_stats" in result["repair"]
    else:
        assert "repair_loss_barrier" in result and result["repair"].startswith("hidden units renormalised")


@pytest.mark.parametrize("name", ["mlp", "cnn"])
def test_repair_changes_nothing_between_a_model_and_itself(name: str) -> None:
    model, a = _trained(name, which=1, epochs=1)
    x = repair.sample(*_data(SHAPES[name], 256, 0)[:1], tuple(torch.arange(256).split(64)))
    stats = repair.unit_stats(model, x)
    fixed = repair.repaired(model, a, repair.targets(stats, stats, 0.5), x)
    for key in a:
        assert torch.allclose(fixed[key], a[key], rtol=1e-5, atol=1e-6), key


def test_distance_is_over_parameters_only() -> None:
    model = nn.Sequential(nn.Linear(2, 2), nn.BatchNorm1d(2))
    a = fusion.snapshot(model)
    b = {key: value.clone() for key, value in a.items()}
    b["1.running_mean"] += 5.0  # a buffer: left out
    assert fusion.parameter_distance(model, a, b) == 0.0
    b["0.bias"] += torch.tensor([3.0, 4.0])
    assert fusion.parameter_distance(model, a, b) == pytest.approx(5.0)


# --------------------------------------------------------------------------- moving where it must


def test_the_ensemble_beats_the_average_of_two_initialisations(two_inits: dict) -> None:
    probe, scope, a, b = two_inits["probe"], two_inits["scope"], two_inits["a"], two_inits["b"]
    result = fusion.fuse(probe, [a, b], scope)
    assert result["ensemble_acc"] > result["fused_acc"] and result["ensemble_loss"] < result["fused_loss"]
    data = scope.data_for([0, 1])[0]
    mean = (probe.logits(a, data.x) + probe.logits(b, data.x)) / 2  # logits averaged, softmax after
    assert result["ensemble_acc"] == (mean.argmax(1) == data.y).float().mean().item()


def _stats(model: nn.Module, state: dict[str, torch.Tensor], x: torch.Tensor) -> repair.Stats:
    model.load_state_dict(state)
    return repair.unit_stats(model, x)


def test_repair_restores_the_collapsed_midpoint_and_lowers_the_barrier(two_inits: dict) -> None:
    model, probe, a, b = two_inits["model"], two_inits["probe"], two_inits["a"], two_inits["b"]
    x = repair.sample(probe.bn_x, probe.bn_batches)
    wanted = repair.targets(_stats(model, a, x), _stats(model, b, x), 0.5)
    midpoint = fusion.interpolate_state(a, b, 0.5)
    collapsed = _stats(model, midpoint, x)
    assert collapsed[-1][1].mean() < 0.8 * wanted[-1][1].mean()  # the case: the midpoint lost variance
    restored = _stats(model, repair.repaired(model, midpoint, wanted, x), x)
    for (mean, std), (target_mean, target_std) in zip(restored, wanted):
        assert torch.allclose(std, target_std, rtol=1e-3, atol=1e-5)
        assert torch.allclose(mean, target_mean, rtol=1e-3, atol=1e-4)
    result = fusion.analyse(probe, [a, b], two_inits["scope"], points=5, match="none")
    assert result["loss_barrier"] > 0 and result["train_loss_barrier"] > 0  # positive: the path is worse
    assert result["repair_loss_barrier"] < result["loss_barrier"]
    assert result["repair_midpoint_acc"] >= result["midpoint_acc"] and result["distance"] > 0
    pair = result["pairs"][0]
    assert pair["repair_loss"][0] == pair["loss"][0] and pair["repair_loss"][-1] == pair["loss"][-1]


def test_the_training_curve_is_measured_on_the_training_subset(two_inits: dict) -> None:
    probe, scope, a, b = two_inits["probe"], two_inits["scope"], two_inits["a"], two_inits["b"]
    pair = fusion.analyse(probe, [a, b], scope, points=3, match="none")["pairs"][0]
    assert pair["train_loss"][0] == probe.measure(a, scope.train_for([0, 1]))[0]
    assert pair["train_loss"] != pair["loss"]  # other data than the held-out curve's
    without = fusion.Scope("union", held_out=scope.held_out)
    assert "train_loss_barrier" not in fusion.analyse(probe, [a, b], without, points=3, match="none")


# --------------------------------------------------------------------------- where REPAIR does not apply


def test_repair_refuses_batchnorm_and_layernorm_in_one_line() -> None:
    from fedpfn.core.models import build_model

    resnet = build_model("resnet20", SHAPES["resnet20"], CLASSES)
    with pytest.raises(ValueError, match=r"^REPAIR: ResNet20 has BatchNorm: .*reset_bn_stats.*REPAIR's role"):
        repair.repaired(resnet, fusion.snapshot(resnet), [], torch.zeros(1, *SHAPES["resnet20"]))
    vit = build_model("vit_tiny28", (1, 28, 28), CLASSES)
    problem = repair.repair_problem(vit)
    assert problem is not None and "LayerNorm" in problem and "\n" not in problem
    with pytest.raises(ValueError, match="LayerNorm"):
        repair.repaired(vit, fusion.snapshot(vit), [], torch.zeros(1, 1, 28, 28))
    # the rest stands beside a ViT's barrier: ensemble, distance, the curve and its note
    x, y = torch.randn(8, 1, 28, 28, generator=torch.Generator().manual_seed(0)), torch.arange(8) % CLASSES
    probe = fusion.Probe(vit, x, (torch.arange(8),))
    a = fusion.snapshot(vit)
    b = {key: value + 0.01 if value.is_floating_point() else value for key, value in a.items()}
    scope = fusion.Scope("test", test=fusion.EvalData("t", x, y))
    result = fusion.analyse(probe, [a, b], scope, 3, match="none")
    assert result["repair"] == problem and "repair_loss_barrier" not in result
    assert result["distance"] > 0 and 0 <= result["ensemble_acc"] <= 1
    assert repair.note(vit, ()) == problem


# --------------------------------------------------------------------------- in the commands' results


def test_a_soup_reports_the_ensemble_and_the_distance_beside_its_soups() -> None:
    from tests.support.soups import soup_seed_data, soup_tuned

    from fedpfn.experiments import soup_run

    setup = soup_seed_data()
    copies = soup_run.soup_arm(setup, [setup.start] * 3, points=3)
    assert copies["ensemble_acc"] == copies["uniform_acc"] and copies["distance"] == 0.0
    states, _ = soup_tuned(setup, "plain")
    strangers = [states[0], *(soup_tuned(soup_seed_data(model_seed=s), "plain")[0][0] for s in (1, 2))]
    figures = soup_run.soup_arm(setup, strangers, points=3)
    assert figures["ensemble_acc"] > figures["uniform_acc"] and figures["distance"] > 0
    assert all(pair["distance"] > 0 for pair in figures["pairs"])


def test_training_subsets_are_seeded_inside_each_models_samples() -> None:
    shards = [torch.arange(0, 50), torch.arange(50, 80), torch.arange(0, 50)]
    chosen = lmc_run.train_subsets(shards, [10, 40, 10], seed=3)
    assert [len(c) for c in chosen] == [10, 30, 10]  # all 30 where fewer than asked
    assert set(chosen[0].tolist()) <= set(range(50)) and set(chosen[1].tolist()) == set(range(50, 80))
    assert chosen[2] is chosen[0]  # the same samples, the same subset: a union counts them once
    again, other = (lmc_run.train_subsets(shards, [10, 40, 10], seed) for seed in (3, 4))
    assert torch.equal(again[0], chosen[0]) and not torch.equal(other[0], chosen[0])


def test_stored_results_without_these_figures_stay_readable() -> None:
    """Gate cells kept before these figures (docs/alignment/cells.json's figures, as they were kept
    then): summaries skip what a seed lacks, and so does the table."""
    import json
    from pathlib import Path

    from fedpfn.experiments import lmc_render

    kept_then = ("loss_barrier", "loss_midpoint", "matched_loss_barrier", "permutation_loss", "moved_fraction",
                 "fused_acc", "mean_individual_acc", "fusion_gap")  # fmt: skip
    cells = json.loads((Path(__file__).resolve().parents[2] / "docs/alignment/cells.json").read_text())
    kept = cells["mlp-same-init"]["seeds"].items()
    seeds = {arm: [{"seed": int(s), **{k: arms[arm][k] for k in kept_then}} for s, arms in kept]
             for arm in ("plain", "diff-init")}  # fmt: skip
    paired = lmc_run.paired_difference(seeds["diff-init"], seeds["plain"])
    assert "permutation_loss" in paired and "ensemble_acc" not in paired and "distance" not in paired
    summary = {key: paired[key] for key in lmc_run.figures_in(seeds["plain"])}
    plain = {"seeds": seeds["plain"], "summary": summary}
    result = {"config": {"measured_on": "union"}, "settings": {"plain": plain}}
    assert lmc_render.beside_table(result) == []  # nothing to stand beside: no table, no error
    plain["summary"] = {**summary, "distance": {"mean": 2.0, "std": None}}
    plain["summary"]["ensemble_acc"] = {"mean": 0.9, "std": None}
    table = lmc_render.beside_table(result)
    assert "| arm | loss barrier | ‖A − B‖ | fused acc (%) | ensemble acc (%) |" in table
    assert "| plain | " in table[-1] and "+2.00" in table[-1] and "+90.00" in table[-1]


def test_the_seed_line_and_the_figure_show_them_where_measured(two_inits: dict, tmp_path) -> None:
    from fedpfn.experiments import lmc, lmc_render

    result = fusion.analyse(two_inits["probe"], [two_inits["a"], two_inits["b"]], two_inits["scope"], 3, "midpoint")
    seed = {**result, "seed": 0, "seconds": 1.0, "matched_loss_barrier": 0.0}
    line = lmc.seed_line("diff-init", seed)
    assert f", ensemble {100 * result['ensemble_acc']:.2f} %, REPAIRed barrier" in line and line.endswith("(1.0 s)")
    summary = lmc_run.over_seeds([seed])  # no matched curve here (the midpoint only): drawn without it
    assert {"train_loss_mean", "repair_loss_mean", "repair_acc_mean"} <= set(summary["curve"])
    config = {"measured_on": "union", "dataset": "synthetic", "model": two_inits["name"], "models": 2, "epochs": 3,
              "split": "same-data", "start": "init", "lr": 0.05, "granularity": "weight"}  # fmt: skip
    result = {"config": config, "settings": {"plain": {"seeds": [seed], "summary": summary}}}
    assert [p.suffix for p in lmc_render.plot_curves(result, tmp_path / "lmc.png")] == [".png", ".pdf"]
