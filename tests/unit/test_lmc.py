"""The LMC analysis (fedpfn.analysis.fusion) on small synthetic tensors, and its command (fedpfn.experiments.lmc)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from PIL import Image

from fedpfn.analysis import fusion, matchers
from fedpfn.core.anchors import draw_mask
from fedpfn.core.data import find_data_problem
from fedpfn.core.models import build_model
from fedpfn.experiments import lmc, lmc_render, lmc_run
from tests.support.checks import assert_provenance
from tests.support.idx import write_idx_set

SHAPE = (1, 4, 4)
CLASSES = 3
needs_fmnist = pytest.mark.skipif(
    find_data_problem("fmnist", None, False) is not None, reason="Fashion-MNIST not installed"
)


def _data(n: int = 240, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(n, *SHAPE, generator=gen)
    y = (x.flatten(1)[:, :3].argmax(1)).long()  # a learnable rule
    return x, y


pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def trained() -> dict:
    """Two MLPs from one init on the two halves of a synthetic set, plus a probe on held-out data."""
    model, init = lmc_run.initial_model("mlp", SHAPE, CLASSES, seed=0, device=torch.device("cpu"))
    x, y = _data()
    test = fusion.EvalData("test", *_data(100, seed=1))
    spec = lmc_run.TrainSpec(epochs=2, lr=0.1, batch_size=16)
    halves = [torch.arange(0, 120), torch.arange(120, 240)]
    states = train_models(model, init, (x, y), halves, spec)
    return {
        "model": model,
        "init": init,
        "states": states,
        "probe": fusion.Probe(model),
        "test": [test],
        "x": x,
        "y": y,
        "halves": halves,
    }


def train_models(model, init, data, indices, spec, seed=0, arm=lmc_run.Arm("plain")) -> list[dict]:
    """The K models of `arm` trained from `init` on `indices`, as the gate trains them."""
    scope = fusion.Scope("test", test=fusion.EvalData("t", data[0][:1], data[1][:1]))
    setup = lmc_run.SeedSetup(seed, model, [init] * (1 + len(indices)), list(indices), scope, fusion.Probe(model))
    return lmc_run.train_arm(setup, arm, data, spec, "weight")


# --------------------------------------------------------------------------- the analysis


def test_barrier_of_a_model_with_itself_is_zero(trained: dict) -> None:
    a = trained["states"][0]
    curve = fusion.interpolation_curve(trained["probe"], a, a, trained["test"], points=5)
    assert len(set(curve["loss"])) == 1 and len(set(curve["acc"])) == 1
    zeros = {"loss_barrier": 0.0, "loss_midpoint": 0.0, "acc_barrier": 0.0, "acc_midpoint": 0.0}
    assert fusion.curve_barriers(curve) == zeros


def test_end_points_equal_the_models_own_figures(trained: dict) -> None:
    a, b = trained["states"]
    probe = trained["probe"]
    curve = fusion.interpolation_curve(probe, a, b, trained["test"], points=11)
    assert curve["alpha"][0] == 0.0 and curve["alpha"][-1] == 1.0 and len(curve["alpha"]) == 11
    assert (curve["loss"][0], curve["acc"][0]) == probe.measure(a, trained["test"])
    assert (curve["loss"][-1], curve["acc"][-1]) == probe.measure(b, trained["test"])
    assert curve["loss"][0] != curve["loss"][-1]  # the two models really differ


def test_interpolate_state_is_exact_at_the_ends_and_linear_inside() -> None:
    a = {"w": torch.randn(5), "n": torch.tensor(3)}
    b = {"w": torch.randn(5), "n": torch.tensor(7)}
    assert torch.equal(fusion.interpolate_state(a, b, 0.0)["w"], a["w"])
    assert torch.equal(fusion.interpolate_state(a, b, 1.0)["w"], b["w"])
    torch.testing.assert_close(fusion.interpolate_state(a, b, 0.25)["w"], 0.75 * a["w"] + 0.25 * b["w"])
    assert int(fusion.interpolate_state(a, b, 0.5)["n"]) == 3  # integer buffers come from A


def test_barrier_figures_on_a_known_curve() -> None:
    alphas = [0.0, 0.5, 1.0]
    assert fusion.signed_barrier(alphas, [1.0, 3.0, 2.0]) == pytest.approx(1.5)
    assert fusion.signed_barrier(alphas, [0.9, 0.5, 0.7], higher_is_worse=False) == pytest.approx(0.3)
    assert fusion.midpoint_excess(alphas, [1.0, 3.0, 2.0]) == pytest.approx(1.5)


def test_a_path_that_beats_its_chord_has_a_negative_barrier() -> None:
    """The sign: the old figure took the max over a grid holding the end points, so it read 0 here."""
    alphas = [0.0, 0.25, 0.5, 0.75, 1.0]
    loss = [1.0, 0.6, 0.4, 0.7, 1.2]  # every interior point below the chord
    assert fusion.signed_barrier(alphas, loss) == pytest.approx(0.7 - 1.15)  # the least improvement
    assert fusion.midpoint_excess(alphas, loss) == pytest.approx(0.4 - 1.1)
    acc = [0.5, 0.7, 0.8, 0.7, 0.6]  # accuracy above the chord everywhere inside: negative too
    assert fusion.signed_barrier(alphas, acc, higher_is_worse=False) == pytest.approx(0.575 - 0.7)


def test_a_curve_needs_its_midpoint() -> None:
    with pytest.raises(ValueError, match="odd number of points"):
        fusion.interpolation_curve(fusion.Probe(build_model("mlp", SHAPE, CLASSES)), {}, {}, [], points=4)
    with pytest.raises(ValueError, match="interior point"):
        fusion.signed_barrier([0.0, 1.0], [1.0, 2.0])


def test_scope_names_where_figures_are_measured() -> None:
    x, y = _data(30)
    test, held = fusion.EvalData("test", x[:10], y[:10]), fusion.EvalData("h0", x[10:20], y[10:20])
    other = fusion.EvalData("h1", x[20:], y[20:])
    assert fusion.Scope("test", test=test).data_for([0, 1]) == [test]
    assert fusion.Scope("own", held_out=(held, other)).data_for([0, 1]) == [held, other]
    union = fusion.Scope("union", held_out=(held, other)).data_for([0, 1])
    assert len(union) == 1 and torch.equal(union[0].x, x[10:])
    assert fusion.Scope("union", held_out=(held, held)).data_for([0, 1]) == [held]  # a shared set once
    with pytest.raises(ValueError, match="choose one of test, own, union"):
        fusion.Scope("train")
    with pytest.raises(ValueError, match="held-out data"):
        fusion.Scope("own", test=test)


def test_anchored_training_keeps_shared_anchors_bit_identical(trained: dict) -> None:
    model, init = trained["model"], trained["init"]
    spec = lmc_run.TrainSpec(epochs=2, lr=0.1, momentum=0.9, weight_decay=1e-2, batch_size=16)
    shards = [torch.arange(0, 80), torch.arange(80, 160), torch.arange(160, 240)]
    data = (trained["x"], trained["y"])
    shared = lmc_run.masks_for(lmc_run.Arm("shared", 0.4), model, 3, 3, "weight")
    states = train_models(model, init, data, shards, spec, seed=3, arm=lmc_run.Arm("shared", 0.4))
    for name, is_anchor in shared[0].items():
        for s in states:
            assert torch.equal(s[name][is_anchor], init[name][is_anchor]), name
        assert not torch.equal(states[0][name][~is_anchor], init[name][~is_anchor]), name  # the rest trained


def test_independent_masks_freeze_as_much_and_share_nothing(trained: dict) -> None:
    """The control: each model its own mask at the same ratio, each kept exactly at the start."""
    model, init = trained["model"], trained["init"]
    masks = lmc_run.masks_for(lmc_run.Arm("independent", 0.4), model, 2, 3, "weight")
    shared = lmc_run.masks_for(lmc_run.Arm("shared", 0.4), model, 2, 3, "weight")
    assert shared[0] is shared[1] and lmc_run.masks_for(lmc_run.Arm("plain"), model, 2, 3, "weight") == [None] * 2
    total = sum(m.numel() for m in masks[0].values())
    fixed = [sum(int(m.sum()) for m in mask.values()) / total for mask in masks]
    assert fixed == pytest.approx([0.4, 0.4], abs=0.03)
    assert any(not torch.equal(masks[0][k], masks[1][k]) for k in masks[0])
    spec = lmc_run.TrainSpec(epochs=1, lr=0.1, batch_size=16)
    states = train_models(model, init, (trained["x"], trained["y"]), trained["halves"], spec, seed=3,
                          arm=lmc_run.Arm("independent", 0.4))  # fmt: skip
    for state, mask in zip(states, masks):
        assert all(torch.equal(state[k][mask[k]], init[k][mask[k]]) for k in mask)


def test_batch_orders_come_from_the_seed_alone(trained: dict) -> None:
    """The same seed gives the same plain models again (so settings differ only in anchors); another does not."""
    model, init, data = trained["model"], trained["init"], (trained["x"], trained["y"])
    spec = lmc_run.TrainSpec(epochs=2, lr=0.1, batch_size=16)
    again = train_models(model, init, data, trained["halves"], spec, seed=0)
    other = train_models(model, init, data, trained["halves"], spec, seed=1)
    for s, t, u in zip(again, trained["states"], other):
        assert all(torch.equal(s[k], t[k]) for k in s)
        assert not all(torch.equal(s[k], u[k]) for k in s)


def test_fusion_of_identical_models_equals_their_accuracy(trained: dict) -> None:
    a = trained["states"][0]
    result = fusion.fuse(trained["probe"], [a, a, a], fusion.Scope("test", test=trained["test"][0]))
    own_loss, own_acc = trained["probe"].measure(a, trained["test"])
    assert result["fused_acc"] == own_acc and result["fused_loss"] == own_loss  # bit for bit
    assert result["individual_acc"] == [own_acc] * 3
    assert result["mean_individual_acc"] == pytest.approx(own_acc, abs=1e-12)  # float mean of 3 equal values
    assert result["fusion_gap"] == pytest.approx(0.0, abs=1e-12)


def test_average_states_is_the_mean() -> None:
    states = [{"w": torch.full((3,), float(v))} for v in (1, 2, 6)]
    torch.testing.assert_close(fusion.average_states(states)["w"], torch.full((3,), 3.0))


def test_bn_reset_recomputes_running_mean_for_resnet20() -> None:
    torch.manual_seed(0)
    model = build_model("resnet20", (3, 8, 8), 10).eval()
    x = torch.randn(6, 3, 8, 8) + 2.0
    before = model.bn1.running_mean.clone()
    fusion.reset_bn_stats(model, x, [torch.arange(4)])
    assert not torch.equal(model.bn1.running_mean, before)
    with torch.no_grad():  # momentum None over one batch: exactly that batch's mean
        expected = model.conv1(x[:4]).mean((0, 2, 3))
    torch.testing.assert_close(model.bn1.running_mean, expected)
    assert model.bn1.momentum == 0.1 and not model.training  # settings put back


def test_analyse_reports_pairs_barriers_and_fusion(trained: dict) -> None:
    scope = fusion.Scope("test", test=trained["test"][0])
    result = fusion.analyse(trained["probe"], trained["states"], scope, points=3)
    assert [p["models"] for p in result["pairs"]] == [[0, 1]] and result["measured_on"] == "test"
    assert result["loss_barrier"] == result["pairs"][0]["loss_barrier"]
    assert result["loss_midpoint"] == result["loss_barrier"]  # three points: the midpoint is the interior
    assert 0 <= result["moved_fraction"] <= 1
    summary = lmc_run.over_seeds([result, result])
    assert summary["fused_acc"] == {"mean": result["fused_acc"], "std": 0.0}
    assert summary["curve"]["alpha"] == [0.0, 0.5, 1.0] and summary["curve"]["n"] == 2
    better = {**result, "seed": 0, "fused_acc": result["fused_acc"] + 0.25}
    paired = lmc_run.paired_difference([better], [{**result, "seed": 0}])
    assert paired["fused_acc"]["mean"] == pytest.approx(0.25) and paired["loss_barrier"]["mean"] == 0.0


def test_own_scope_measures_each_model_and_the_average_on_its_own_data(trained: dict) -> None:
    x, y = trained["x"], trained["y"]
    held = (fusion.EvalData("h0", x[:60], y[:60]), fusion.EvalData("h1", x[120:180], y[120:180]))
    probe, states = trained["probe"], trained["states"]
    result = fusion.fuse(probe, states, fusion.Scope("own", held_out=held))
    assert result["individual_acc"] == [probe.measure(s, [h])[1] for s, h in zip(states, held)]
    fused = fusion.average_states(states)
    assert result["fused_acc"] == pytest.approx(sum(probe.measure(fused, [h])[1] for h in held) / 2)


def test_mean_std_uses_n_minus_1_and_gives_no_std_from_one_seed() -> None:
    """One mean_std in the project (fedpfn.analysis.inference): one seed has no std (JSON null), not 0."""
    from fedpfn.analysis import inference, stats

    assert lmc_run.mean_std is inference.mean_std is stats.mean_std
    assert lmc_run.spread([1.0, 2.0, 3.0]) == {"mean": 2.0, "std": 1.0}
    assert lmc_run.spread([5.0]) == {"mean": 5.0, "std": None}
    one_seed = [{**dict.fromkeys(lmc_run.FIGURES, 0.5), "pairs": [{"alpha": [0.0, 1.0], "loss": [1.0, 2.0]}]}]
    summary = json.loads(json.dumps(lmc_run.over_seeds(one_seed)))
    assert summary["fused_acc"] == {"mean": 0.5, "std": None} and summary["curve"]["loss_std"] == [None, None]


# --------------------------------------------------------------------------- seeded draws


def test_initial_model_is_seeded_and_leaves_the_global_rng_alone() -> None:
    cpu = torch.device("cpu")
    torch.manual_seed(123)
    expected_next = torch.rand(1)
    torch.manual_seed(123)
    _, first = lmc_run.initial_model("mlp", SHAPE, CLASSES, 5, cpu)
    assert torch.equal(torch.rand(1), expected_next)
    _, again = lmc_run.initial_model("mlp", SHAPE, CLASSES, 5, cpu)
    _, other = lmc_run.initial_model("mlp", SHAPE, CLASSES, 6, cpu)
    _, own = lmc_run.initial_model("mlp", SHAPE, CLASSES, 5, cpu, which=1)  # diff-init's model 0
    assert all(torch.equal(first[k], again[k]) for k in first)
    assert not torch.equal(first["classifier.weight"], other["classifier.weight"])
    assert not torch.equal(first["classifier.weight"], own["classifier.weight"])


def test_pools_and_shards_cover_their_samples_once() -> None:
    labels = torch.arange(300) % 10
    pool = lmc_run.sample_pool(300, 200, 4, lmc_run.Draw.LMC_TRAIN_POOL)
    assert len(pool) == 200 and len(set(pool.tolist())) == 200
    assert torch.equal(pool, lmc_run.sample_pool(300, 200, 4, lmc_run.Draw.LMC_TRAIN_POOL))
    assert not torch.equal(pool, lmc_run.sample_pool(300, 200, 4, lmc_run.Draw.LMC_TEST_POOL))  # streams differ
    shards = lmc_run.split_pool(labels, pool, 3, "dirichlet", 0.5, 4)
    assert sorted(torch.cat(shards).tolist()) == sorted(pool.tolist())
    assert len({len(s) for s in shards}) > 1  # label skew makes unequal shards
    same = lmc_run.split_pool(labels, pool, 3, "same-data", 0.5, 4)
    assert all(torch.equal(s, pool) for s in same)
    batches = lmc_run.bn_batches(pool, 3, 16, 4)
    assert [len(b) for b in batches] == [16, 16, 16] and set(torch.cat(batches).tolist()) <= set(
        pool.tolist()
    )


# --------------------------------------------------------------------------- the command: refusals


def _run_cli(argv: list[str], capsys) -> tuple[int, str, str]:
    try:
        code = lmc.main(argv)
    except SystemExit as exc:  # argparse's own refusals
        code = exc.code
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.mark.parametrize(
    "argv, says",
    [
        (["--dataset", "nope"], "dataset: unknown 'nope'"),
        (["--model", "nope"], "model: unknown 'nope'"),
        (["--anchor-ratio", "1.0"], "anchor_ratio: 1.0 must be in (0, 1)"),
        (["--anchor-ratio", "0.2,-0.1"], "anchor_ratio: -0.1 must be in (0, 1)"),
        (["--anchor-ratio", "0.2,0.2"], "anchor_ratio: 0.2,0.2 repeats a value"),
        (["--points", "99999999999"], "points: 99999999999 must be in [3, 101]"),
        (["--points", "4"], "points: 4 must be odd, so the midpoint a = 0.5 is measured"),
        (["--start", "trained"], "start: unknown 'trained'; use init, or trained:N"),
        (["--start", "trained:0"], "start: unknown 'trained:0'"),
        (["--arms", "shared,independent"], "arms: shared,independent leaves out plain"),
        (["--arms", "plain,shuffled"], "arms: unknown 'shuffled'"),
        (["--models", "100000"], "models: 100000 must be in [2, 64]"),
        (["--model", "cnn", "--width", "32"], "width: only the mlp has a hidden width; drop it"),
        (["--split", "same-data", "--alpha", "0.1"], "alpha: only the dirichlet split uses it; drop it"),
        (["--arms", "plain,diff-init", "--anchor-ratio", "0.2"], "anchor_ratio: no shared or independent arm"),
        (["--where", "test", "--held-out", "0.3"], "held_out: --where test measures on the test set"),
        (["--where", "train"], "where: unknown 'train'"),
        (["--where", "own", "--test-subset", "100"], "test_subset: only --where test measures on the test set"),
        (["--models", "1"], "models: 1 must be in [2, 64]"),
        (["--models", "two"], "models: 'two' is not an integer"),
        (["--seeds", ""], "seeds: '' is not a list of"),
        (["--seeds=-1"], "seeds: -1 must be in [0, 4294967295]"),
        (["--seeds", "0,4294967296"], "seeds: 4294967296 must be in [0, 4294967295]"),
        (["--seeds", "3,3"], "seeds: 3,3 repeats a value"),
        (["--alpha", "inf"], "alpha: 'inf' is not a finite number"),
        (["--alpha", "0"], "alpha: 0.0 must be > 0"),
        (["--lr", "nan"], "lr: 'nan' is not a finite number"),
        (["--split", "iid"], "split: unknown 'iid'"),
        (["--train-subset", "15"], "train_subset: 15 leaves a shard under 10 samples"),
        (["--data-root", "/nonexistent"], "dataset: data root /nonexistent does not exist"),
        (["--nosuch", "1"], "unknown flag --nosuch"),
        (["--matchers", "full,nearest"], "matchers: unknown 'nearest'; use one of full, masked, changes, activation"),
        (["--matchers", "nearest"], "matchers: unknown 'nearest'"),  # once: not again for leaving out full
        (["--matchers", "activation,masked"], "matchers: activation,masked leaves out full"),
    ],
)
def test_cli_refuses_bad_values(argv: list[str], says: str, tmp_path: Path, capsys) -> None:
    code, _, err = _run_cli([*argv, "--out", str(tmp_path / "out")], capsys)
    assert code == 2
    assert err.startswith("error: ") and says in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "out").exists()


def test_cli_reports_every_problem_at_once(tmp_path: Path, capsys) -> None:
    a_file = tmp_path / "file"
    a_file.write_text("mine")
    argv = ["--models", "1", "--seeds=-1", "--lr", "inf", "--epochs", "0", "--out", str(a_file)]
    code, _, err = _run_cli(argv, capsys)
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 5, err
    assert all(line.startswith("error: ") for line in lines)
    assert {line.split(":")[1].strip() for line in lines} == {"models", "seeds", "lr", "epochs", "out"}
    assert a_file.read_text() == "mine"


def _a_file(tmp: Path) -> Path:
    (tmp / "f").write_text("x")
    return tmp / "f"


def _under_a_file(tmp: Path) -> Path:
    return _a_file(tmp) / "sub"


def _holding_a_folder_named_lmc_png(tmp: Path) -> Path:
    (tmp / "o" / "lmc.png").mkdir(parents=True)
    return tmp / "o"


@pytest.mark.parametrize(
    "make_out, says",
    [
        (_a_file, "is a file; give a folder"),
        (_under_a_file, "is a file, so"),
        (lambda tmp: Path("/proc/1/lmc"), "lies in /proc, the system's"),  # never written, not even by root
        (_holding_a_folder_named_lmc_png, "not plain files"),
    ],
)
def test_cli_refuses_an_unusable_out(make_out, says: str, tmp_path: Path, capsys) -> None:
    if "/proc/1" in says and not Path("/proc/1").is_dir():
        pytest.skip("no /proc on this system")
    code, _, err = _run_cli(["--out", str(make_out(tmp_path))], capsys)
    assert code == 2 and err.startswith("error: out: ") and says in err and err.count("\n") == 1, err


def test_cli_refuses_to_overwrite_earlier_results(tmp_path: Path, capsys) -> None:
    (tmp_path / "lmc.json").write_text('{"earlier": 1}\n')
    code, _, err = _run_cli(["--out", str(tmp_path)], capsys)
    assert code == 2 and "already holds lmc.json; add --overwrite" in err and err.count("\n") == 1
    assert (tmp_path / "lmc.json").read_text() == '{"earlier": 1}\n'


@pytest.mark.parametrize(
    "side, argv, says",
    [
        (10, ["--model", "cnn"], "the cnn needs images of at least 18 x 18 pixels"),
        (28, ["--train-subset", "500"], "train_subset: 500 exceeds the 40 samples"),
        (28, ["--where", "test", "--test-subset", "11"], "test_subset: 11 exceeds the 10 samples"),
    ],
)
def test_cli_refuses_what_only_the_data_shows_before_training(
    side: int, argv: list[str], says: str, tmp_path: Path, capsys
) -> None:
    write_idx_set(tmp_path / "data", n_train=40, n_test=10, side=side)
    code, out, err = _run_cli(
        [*argv, "--data-root", str(tmp_path / "data"), "--out", str(tmp_path / "o")], capsys
    )
    assert code == 2 and err.startswith("error: ") and says in err and err.count("\n") == 1, err
    assert out == "" and not (tmp_path / "o").exists()  # nothing trained, nothing written


def test_cli_refuses_an_empty_test_split(tmp_path: Path, capsys) -> None:
    write_idx_set(tmp_path, n_train=40, n_test=0)
    code, _, err = _run_cli(["--data-root", str(tmp_path), "--out", str(tmp_path / "o")], capsys)
    assert code == 2 and "test split is empty" in err and err.count("\n") == 1, err


# --------------------------------------------------------------------------- the command: help and output


def test_help_shows_one_default_each_and_marks_out_required(capsys) -> None:
    with pytest.raises(SystemExit) as info:
        lmc.build_parser().parse_args(["--help"])
    assert info.value.code == 0
    text = " ".join(capsys.readouterr().out.split())  # argparse wraps lines
    usage, listed = text.split(" options: ")
    options = listed.split(" --")[1:]
    assert "(0.4,)" not in text and "None" not in text and "(0, 1, 2)" not in text
    assert "(default: 0.4)" in text and "(default: 0,1,2)" in text and "(default: mlp)" in text
    for option in options:
        assert option.count("(default") <= 1, option
    out_help = next(o for o in options if o.startswith("out DIR "))
    assert "(required)" in out_help and "default" not in out_help
    assert usage.startswith("usage: python -m fedpfn.experiments.lmc [-h] --out DIR ")  # not in brackets: required


def test_seed_line_uses_the_table_units() -> None:
    result = {
        "seed": 2, "loss_barrier": -0.01234, "matched_loss_barrier": -0.02, "permutation_loss": 0.3456,
        "moved_fraction": 0.5, "fused_acc": 0.8123, "mean_individual_acc": 0.8, "seconds": 1.25,
    }  # fmt: skip
    assert lmc.seed_line("plain", result) == (
        "seed 2           plain: loss barrier -0.012 (matched -0.020), P +0.346, moved 50 %, "
        "fused 81.23 % vs own 80.00 % (1.2 s)"
    )


def _small_fmnist_argv(out: Path, seeds: str = "0,1") -> list[str]:
    return [
        "--anchor-ratio",
        "0.4",
        "--seeds",
        seeds,
        "--epochs",
        "1",
        "--train-subset",
        "600",
        "--points",
        "5",
        "--threads",
        "1",
        "--device",
        "cpu",
        "--out",
        str(out),
    ]


@needs_fmnist
def test_cli_end_to_end_on_a_small_fmnist_subset(tmp_path: Path, capsys) -> None:
    """Every arm, the figures of each, and the positive control moving where plain does not."""
    out = tmp_path / "lmc"
    argv = [*_small_fmnist_argv(out), "--split", "same-data", "--width", "32", "--held-out", "0.25"]
    assert lmc.main(argv) == 0
    printed = capsys.readouterr().out
    result = json.loads((out / "lmc.json").read_text())
    assert list(result["settings"]) == ["plain", "shared-0.4", "independent-0.4", "diff-init"]
    measured = set(lmc_run.FIGURES)
    for entry in result["settings"].values():
        assert [s["seed"] for s in entry["seeds"]] == [0, 1]
        assert measured <= set(entry["summary"])
    assert measured | {"matchers"} == set(result["settings"]["shared-0.4"]["vs_plain"])
    # beside the barrier: on training data, REPAIRed (an MLP: no BatchNorm), the distance, the ensemble
    assert result["config"]["repair"].startswith("hidden units renormalised") and "| REPAIRed |" in printed
    plain, shared, control = (result["settings"][k]["seeds"][0] for k in ("plain", "shared-0.4", "diff-init"))
    assert plain["shard_sizes"] == shared["shard_sizes"] == [450, 450]  # 600 less a quarter held out
    assert shared["anchored_fraction"] == pytest.approx(0.4, abs=0.02)
    assert result["config"]["measured_on"] == "union" and plain["measured_on"] == "union"
    assert control["moved_fraction"] > 0.5 and control["permutation_loss"] > plain["permutation_loss"]
    # every matcher under its name; the top-level figures are full's; changes needs a common start
    assert list(plain["matchers"]) == ["full", "masked", "changes", "activation"]
    assert all(plain[key] == plain["matchers"]["full"][key] for key in matchers.FIGURES)
    assert control["matchers"]["changes"] == {"omitted": matchers.NO_START}
    assert control["matchers"]["activation"]["moved_fraction"] > 0.5 and "converged" in plain["matchers"]["masked"]
    assert result["settings"]["diff-init"]["vs_plain"]["matchers"]["changes"] == {"omitted": matchers.NO_START}
    assert "| arm | P full | P masked | P changes | P activation |" in printed
    assert result["config"]["anchor_ratio"] == [0.4] and result["config"]["seeds"] == [0, 1]
    assert_provenance(result["provenance"])  # commit, libraries, CPU model, threads
    with Image.open(out / "lmc.png") as png:
        assert png.width == 660  # one column of a paper: 3.3 in at 200 dpi
    assert "| shared-0.4 |" in printed and "measured on: union; mean ± std over 2 seeds" in printed
    assert f"seed 0           plain: loss barrier {plain['loss_barrier']:+.3f}" in printed
    assert sorted(p.name for p in out.iterdir()) == ["lmc.json", "lmc.pdf", "lmc.png"]  # no temporary files left


@needs_fmnist
def test_overwrite_replaces_only_the_tools_files(tmp_path: Path, capsys) -> None:
    (tmp_path / "lmc.json").write_text("{}\n")
    (tmp_path / "notes.txt").write_text("mine")
    assert lmc.main([*_small_fmnist_argv(tmp_path, seeds="3"), "--overwrite", "--matchers", "full"]) == 0
    written = json.loads((tmp_path / "lmc.json").read_text())
    assert written["config"]["seeds"] == [3] and list(written["settings"]["plain"]["seeds"][0]["matchers"]) == ["full"]
    assert (tmp_path / "notes.txt").read_text() == "mine"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["lmc.json", "lmc.pdf", "lmc.png", "notes.txt"]


def test_band_note_states_the_std_and_the_count() -> None:
    def result(seeds: int, pairs: int) -> dict:
        plain = {"seeds": [{}] * seeds, "summary": {"curve": {"n": seeds * pairs}}}
        return {"settings": {"plain": plain}}

    assert lmc_render.band_note(result(3, 1)) == "line: mean over 3 seeds; band: ± 1 std (n − 1)"
    assert lmc_render.band_note(result(2, 3)) == "line: mean over 2 seeds x 3 pairs; band: ± 1 std (n − 1)"
    assert lmc_render.band_note(result(1, 1)) == "one curve (1 seed), no band"


def test_a_model_that_diverges_is_a_reading_and_the_run_goes_on(tmp_path: Path, capsys) -> None:
    """At an lr that blows the weights up, every seed and arm says which model diverged at which lr,
    lmc.json and the figure are written, and the table names the arms; before, the first diverged
    model stopped the command, so a regime's other seeds could not count (a bare traceback before that)."""
    out = tmp_path / "lmc"
    argv = [*_small_fmnist_argv(out), "--split", "same-data", "--width", "32", "--lr", "100", "--momentum", "0.99"]
    assert lmc.main(argv) == 0
    printed = capsys.readouterr().out
    result = json.loads((out / "lmc.json").read_text())
    for entry in result["settings"].values():
        assert [s["seed"] for s in entry["seeds"]] == [0, 1]
        assert all("weights are not finite after training (it diverged at lr 100)" in s["diverged"] for s in entry["seeds"])
        assert entry["summary"]["diverged_seeds"] == 2 and "loss_barrier" not in entry["summary"]
    assert "plain: diverged in 2 of 2 seeds" in printed and (out / "lmc.png").is_file()


def test_a_diverged_seed_is_left_out_of_its_arm_and_of_the_pairs(trained: dict) -> None:
    """Figures over the seeds measured; a pair with plain only on seeds both arms measured; the table says so."""
    scope = fusion.Scope("test", test=trained["test"][0])
    result = fusion.analyse(trained["probe"], trained["states"], scope, points=3, matchers=("full",))
    gone = {"seed": 1, "diverged": "model 0's weights are not finite after training (it diverged at lr 9)"}
    plain, shared = [{**result, "seed": 0}, gone], [{**result, "seed": 0}, {**result, "seed": 1, "fused_acc": 2.0}]
    assert lmc_run.measured(plain) == plain[:1]
    assert lmc_run.over_seeds([]) == {} and lmc_run.paired_difference(shared, []) == {}
    paired = lmc_run.paired_difference(shared, lmc_run.measured(plain))
    assert paired["fused_acc"] == {"mean": 0.0, "std": None}  # seed 0 alone; seed 1's 2.0 would move it
    assert lmc_run.by_matcher(shared, lmc_run.measured(plain))["full"]["permutation_loss"]["std"] is None
    summary = {"plain": {**lmc_run.over_seeds(plain[:1]), "diverged_seeds": 1}, "shared": lmc_run.over_seeds(shared)}
    settings = {"plain": {"seeds": plain, "summary": summary["plain"]},
                "shared": {"seeds": shared, "summary": summary["shared"], "vs_plain": paired}}  # fmt: skip
    table = lmc_render.markdown_table({"settings": settings, "config": {"measured_on": "test"}})
    assert "plain: diverged in 1 of 2 seeds, left out of its figures and of the pairs with plain" in table