"""Linear mode connectivity and fusion analysis (fedpfn.lmc), on small synthetic tensors."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

from fedpfn import lmc
from fedpfn.anchors import draw_mask
from fedpfn.data import find_data_problem
from fedpfn.models import build_model

SHAPE = (1, 4, 4)
CLASSES = 3


def _data(n: int = 240, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(n, *SHAPE, generator=gen)
    y = (x.flatten(1)[:, :3].argmax(1)).long()  # a learnable rule
    return x, y


def _state(model: torch.nn.Module) -> lmc.State:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """Tiny models run far faster on one thread, above all on a busy shared CPU; restored after."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def trained() -> dict:
    """Two MLPs from one init on the two halves of a synthetic set, plus a probe on held-out data."""
    torch.manual_seed(0)
    model = build_model("mlp", SHAPE, CLASSES)
    init = _state(model)
    x, y = _data()
    test_x, test_y = _data(100, seed=1)
    spec = lmc.TrainSpec(epochs=2, lr=0.1, batch_size=16)
    halves = [torch.arange(0, 120), torch.arange(120, 240)]
    states = lmc.train_models(model, init, x, y, halves, [1, 2], spec)
    return {"model": model, "init": init, "states": states, "probe": lmc.Probe(model, test_x, test_y), "x": x, "y": y}


def test_barrier_of_a_model_with_itself_is_zero(trained: dict) -> None:
    a = trained["states"][0]
    curve = lmc.interpolation_curve(trained["probe"], a, a, points=5)
    assert len(set(curve["loss"])) == 1 and len(set(curve["acc"])) == 1
    assert lmc.curve_barriers(curve) == {"loss_barrier": 0.0, "acc_barrier": 0.0, "acc_barrier_rel": 0.0}


def test_end_points_equal_the_models_own_figures(trained: dict) -> None:
    a, b = trained["states"]
    probe = trained["probe"]
    curve = lmc.interpolation_curve(probe, a, b, points=11)
    assert curve["alpha"][0] == 0.0 and curve["alpha"][-1] == 1.0 and len(curve["alpha"]) == 11
    assert (curve["loss"][0], curve["acc"][0]) == probe.measure(a)
    assert (curve["loss"][-1], curve["acc"][-1]) == probe.measure(b)
    assert curve["loss"][0] != curve["loss"][-1]  # the two models really differ


def test_interpolate_state_is_exact_at_the_ends_and_linear_inside() -> None:
    a = {"w": torch.randn(5), "n": torch.tensor(3)}
    b = {"w": torch.randn(5), "n": torch.tensor(7)}
    assert torch.equal(lmc.interpolate_state(a, b, 0.0)["w"], a["w"])
    assert torch.equal(lmc.interpolate_state(a, b, 1.0)["w"], b["w"])
    torch.testing.assert_close(lmc.interpolate_state(a, b, 0.25)["w"], 0.75 * a["w"] + 0.25 * b["w"])
    assert int(lmc.interpolate_state(a, b, 0.5)["n"]) == 3  # integer buffers come from A


def test_barrier_figures_on_a_known_curve() -> None:
    alphas = [0.0, 0.5, 1.0]
    assert lmc.barrier(alphas, [1.0, 3.0, 2.0]) == pytest.approx(1.5)
    assert lmc.barrier(alphas, [0.9, 0.5, 0.7], higher_is_worse=False) == pytest.approx(0.3)
    assert lmc.relative_acc_barrier(alphas, [0.9, 0.5, 0.7]) == pytest.approx(0.3 / 0.8)
    assert lmc.barrier(alphas, [1.0, 0.2, 1.0]) == 0.0  # below the line: no barrier


def test_anchored_training_keeps_shared_anchors_bit_identical(trained: dict) -> None:
    model, init, x, y = trained["model"], trained["init"], trained["x"], trained["y"]
    mask = draw_mask(model, 0.4, seed=7)
    spec = lmc.TrainSpec(epochs=2, lr=0.1, momentum=0.9, weight_decay=1e-2, batch_size=16)
    shards = [torch.arange(0, 80), torch.arange(80, 160), torch.arange(160, 240)]
    states = lmc.train_models(model, init, x, y, shards, [3, 4, 5], spec, mask)
    for name, is_anchor in mask.items():
        for s in states:
            assert torch.equal(s[name][is_anchor], init[name][is_anchor]), name
            assert torch.equal(s[name][is_anchor], states[0][name][is_anchor]), name
        assert not torch.equal(states[0][name][~is_anchor], init[name][~is_anchor]), name  # the rest trained


def test_plain_and_anchored_runs_share_init_and_batches(trained: dict) -> None:
    """Same init and order seeds give the same plain models again: only anchors differ between settings."""
    model, init, x, y = trained["model"], trained["init"], trained["x"], trained["y"]
    halves = [torch.arange(0, 120), torch.arange(120, 240)]
    again = lmc.train_models(model, init, x, y, halves, [1, 2], lmc.TrainSpec(epochs=2, lr=0.1, batch_size=16))
    for s, t in zip(again, trained["states"]):
        assert all(torch.equal(s[k], t[k]) for k in s)


def test_fusion_of_identical_models_equals_their_accuracy(trained: dict) -> None:
    a = trained["states"][0]
    fusion = lmc.fuse(trained["probe"], [a, a, a])
    own_loss, own_acc = trained["probe"].measure(a)
    assert fusion["fused_acc"] == own_acc and fusion["fused_loss"] == own_loss  # bit for bit
    assert fusion["individual_acc"] == [own_acc] * 3
    assert fusion["mean_individual_acc"] == pytest.approx(own_acc, abs=1e-12)  # float mean of 3 equal values
    assert fusion["fusion_gap"] == pytest.approx(0.0, abs=1e-12)


def test_average_states_is_the_mean() -> None:
    states = [{"w": torch.full((3,), float(v))} for v in (1, 2, 6)]
    torch.testing.assert_close(lmc.average_states(states)["w"], torch.full((3,), 3.0))


def test_bn_reset_recomputes_running_mean_for_resnet20() -> None:
    torch.manual_seed(0)
    model = build_model("resnet20", (3, 8, 8), 10).eval()
    x = torch.randn(6, 3, 8, 8) + 2.0
    before = model.bn1.running_mean.clone()
    lmc.reset_bn_stats(model, x, [torch.arange(4)])
    assert not torch.equal(model.bn1.running_mean, before)
    with torch.no_grad():  # momentum None over one batch: exactly that batch's mean
        expected = model.conv1(x[:4]).mean((0, 2, 3))
    torch.testing.assert_close(model.bn1.running_mean, expected)
    assert model.bn1.momentum == 0.1 and not model.training  # settings put back


def test_analyse_reports_pairs_barriers_and_fusion(trained: dict) -> None:
    result = lmc.analyse(trained["probe"], trained["states"], points=3)
    assert [p["models"] for p in result["pairs"]] == [[0, 1]]
    assert result["loss_barrier"] == result["pairs"][0]["loss_barrier"] >= 0
    assert result["acc_barrier"] >= 0
    summary = lmc.summarise([result, result])
    assert summary["fused_acc"] == {"mean": result["fused_acc"], "std": 0.0}
    assert summary["curve"]["alpha"] == [0.0, 0.5, 1.0]
    better = {**result, "seed": 0, "fused_acc": result["fused_acc"] + 0.25}
    paired = lmc.paired_difference([better], [{**result, "seed": 0}])
    assert paired["fused_acc"]["mean"] == pytest.approx(0.25) and paired["loss_barrier"]["mean"] == 0.0


@pytest.mark.parametrize(
    "argv, says",
    [
        (["--dataset", "nope"], "unknown dataset"),
        (["--model", "nope"], "unknown model"),
        (["--anchor-ratio", "1.0"], "[0, 1)"),
        (["--anchor-ratio", "-0.1"], "[0, 1)"),
        (["--models", "1"], "at least 2 models"),
        (["--seeds", ""], "--seeds is empty"),
        (["--split", "iid"], "unknown --split"),
        (["--models", "two"], "invalid int value"),
    ],
)
def test_cli_refuses_bad_values(argv: list[str], says: str, tmp_path, capsys) -> None:
    try:
        code = lmc.main([*argv, "--out", str(tmp_path / "out")])
    except SystemExit as exc:  # argparse type errors
        code = exc.code
    err = capsys.readouterr().err
    assert code == 2
    assert says in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "out").exists()


def test_cli_module_exit_code() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "fedpfn.lmc", "--models", "1", "--out", "/nonexistent/x"],
        capture_output=True, text=True, timeout=60,
    )
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "at least 2" in proc.stderr


@pytest.mark.skipif(find_data_problem("fmnist", None, False) is not None, reason="Fashion-MNIST not installed")
def test_cli_end_to_end_on_a_small_fmnist_subset(tmp_path, capsys) -> None:
    out = tmp_path / "lmc"
    argv = ["--anchor-ratio", "0.4", "--seeds", "0,1", "--epochs", "1", "--train-subset", "600",
            "--test-subset", "300", "--points", "3", "--threads", "1", "--device", "cpu", "--out", str(out)]
    assert lmc.main(argv) == 0
    result = json.loads((out / "lmc.json").read_text())
    assert set(result["settings"]) == {"plain", "anchored-0.4"}
    for entry in result["settings"].values():
        assert [s["seed"] for s in entry["seeds"]] == [0, 1]
        assert set(lmc.METRICS) <= set(entry["summary"])
    assert set(lmc.METRICS) == set(result["settings"]["anchored-0.4"]["vs_plain"])
    plain, anchored = (result["settings"][k]["seeds"][0] for k in ("plain", "anchored-0.4"))
    assert plain["shard_sizes"] == anchored["shard_sizes"] and sum(plain["shard_sizes"]) == 600
    assert anchored["anchored_fraction"] == pytest.approx(0.4, abs=0.02)
    assert (out / "lmc.png").stat().st_size > 1000
    assert "| anchored-0.4 |" in capsys.readouterr().out
