"""Model soups (fedpfn.experiments.soup_run) on tiny synthetic tensors, and the pretrain and soup commands."""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from fedpfn.analysis.fusion import  average_states
from fedpfn.core.data import find_data_problem
from fedpfn.core.training import  StepView
from fedpfn.experiments import pretrain, soup, soup_run
from tests.support.checks import assert_provenance
from tests.support.commands import run_main
from tests.support.soups import soup_seed_data, soup_tuned

needs_fmnist = pytest.mark.skipif(
    find_data_problem("fmnist", None, False) is not None, reason="Fashion-MNIST not installed"
)


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_a_soup_of_copies_of_one_model_is_that_model() -> None:
    """Uniform and greedy soups of K copies equal the copy bit for bit: no gain, no barrier (zero case)."""
    setup = soup_seed_data()
    soup_of_copies = average_states([setup.start] * 3)
    assert all(torch.equal(soup_of_copies[name], value) for name, value in setup.start.items())
    figures = soup_run.soup_arm(setup, [setup.start] * 3, points=3)
    assert figures["greedy_kept"] == [0, 1, 2]  # an equal held-out accuracy keeps an ingredient
    assert figures["uniform_acc"] == figures["greedy_acc"] == figures["best_acc"] == figures["test_acc"][0]
    assert figures["uniform_gain"] == figures["greedy_gain"] == 0.0
    assert figures["loss_barrier"] == 0.0 and figures["acc_barrier"] == 0.0


def test_the_greedy_soup_never_falls_below_its_best_ingredient() -> None:
    """Unrelated models average badly (the uniform soup falls: a nonzero case); greedy keeps the best."""
    setup = soup_seed_data()
    states, _ = soup_tuned(setup, "plain")
    strangers = [soup_tuned(soup_seed_data(model_seed=s), "plain")[0][0] for s in (1, 2)]
    for ingredients in (states, [states[0], *strangers]):
        held_acc = [setup.probe.measure(s, [setup.held_out])[1] for s in ingredients]
        kept, greedy_acc = soup_run.greedy_soup(setup.probe, ingredients, setup.held_out, held_acc)
        assert greedy_acc >= max(held_acc) and kept[0] == held_acc.index(max(held_acc))
    figures = soup_run.soup_arm(setup, [states[0], *strangers], points=3)
    assert figures["uniform_held_out_acc"] < max(figures["held_out_acc"])
    assert figures["greedy_held_out_acc"] >= max(figures["held_out_acc"])


def test_shared_anchors_stay_exact_in_every_ingredient_and_independent_masks_differ() -> None:
    setup = soup_seed_data()
    shared, shared_masks = soup_tuned(setup, "shared")
    independent, own_masks = soup_tuned(setup, "independent")
    for states, masks in ((shared, shared_masks), (independent, own_masks)):
        for state, mask in zip(states, masks):
            for name, anchored in mask.items():
                assert torch.equal(state[name][anchored], setup.start[name][anchored]), name
                assert not torch.equal(state[name], setup.start[name]), f"{name} did not train"
    assert all(shared_masks[0][n].equal(m[n]) for m in shared_masks for n in m)
    name = "features.1.weight"
    assert all(not own_masks[i][name].equal(own_masks[j][name]) for i, j in ((0, 1), (1, 2), (0, 2)))
    fraction = [float(m[name].float().mean()) for m in own_masks]
    assert all(abs(f - 0.4) < 0.05 for f in fraction)
    plain, _ = soup_tuned(setup, "plain")
    assert soup_run.masks_for("plain", setup.model, 3, 0, 0.4, "weight") == [None] * 3
    assert not torch.equal(plain[0][name], shared[0][name])  # the anchors change what trains


def test_label_smoothing_as_a_loss_term_is_torchs() -> None:
    logits, targets = torch.randn(5, 4), torch.tensor([0, 3, 1, 1, 2])
    view = StepView(None, {}, logits, logits, logits, targets)  # type: ignore[arg-type]
    smoothed = F.cross_entropy(logits, targets) + soup_run.smoothing_term(0.1)(view)
    assert torch.allclose(smoothed, F.cross_entropy(logits, targets, label_smoothing=0.1), atol=1e-6)
    assert soup_run.smoothing_term(0.0) is None


def test_augmentation_is_seeded_and_moves_pixels_within_its_shift() -> None:
    x = torch.arange(2 * 36, dtype=torch.float32).reshape(2, 1, 6, 6) + 1
    first = soup_run.augmenter(torch.Generator().manual_seed(4))(x)
    again = soup_run.augmenter(torch.Generator().manual_seed(4))(x)
    assert first.shape == x.shape and torch.equal(first, again) and not torch.equal(first, x)
    for image, original in zip(first, x):  # every kept pixel is one of the image's own (or padding)
        assert set(image.unique().tolist()) - {0.0} <= set(original.unique().tolist())


def test_recipes_cover_the_grid_before_repeating() -> None:
    grid = {"lr": (0.1, 0.01), "epochs": (1,), "augment": (False, True), "label_smoothing": (0.0,)}
    drawn = soup_run.recipes(grid, 6, seed=0)
    assert len(set(drawn[:4])) == 4 and drawn[4:] == drawn[:2]
    assert soup_run.recipes(grid, 6, seed=0) == drawn and soup_run.recipes(grid, 6, seed=1) != drawn


@pytest.mark.parametrize(
    "main, argv, says",
    [
        (pretrain.main, ["--model", "nope"], "model: unknown model 'nope'"),
        (pretrain.main, ["--upstream-classes", "1,1"], "upstream_classes: 1,1 repeats a class"),
        (pretrain.main, ["--upstream-classes", "10"], "upstream_classes: fmnist has classes 0 to 9"),
        (pretrain.main, ["--upstream-fraction", "1"], "upstream_fraction: 1.0 must be in (0, 1)"),
        (pretrain.main, ["--momentum", "0.5"], "momentum: only --optimizer sgd uses it"),
        (pretrain.main, ["--epochs", "x"], "epochs: 'x' is not an integer"),
        (soup.main, [], "start: give the start file"),
        (soup.main, ["--start", "none.pt"], "start: 'none.pt' does not exist"),
        (soup.main, ["--start", "w.npz"], "start: 'w.npz' must end in .safetensors"),
        (soup.main, ["--ingredients", "1"], "ingredients: 1 must be in [2, 64]"),
        (soup.main, ["--seeds", "0,0"], "seeds: 0,0 repeats a seed"),
        (soup.main, ["--points", "4"], "points: 4 must be odd"),
        (soup.main, ["--anchor-ratio", "0"], "anchor_ratio: 0.0 must be in (0, 1)"),
        (soup.main, ["--lr", "0.1,-1"], "lr: -1.0 must be > 0"),
    ],
)
def test_the_commands_refuse_bad_values_in_one_line(
    main, argv: list[str], says: str, tmp_path: Path, capsys
) -> None:
    code, err = run_main(main, [*argv, "--out", str(tmp_path / "out")], capsys)
    lines = [line for line in err.splitlines() if says.split(":")[0] + ":" in line]
    assert code == 2 and len(lines) == 1 and says in lines[0], err
    assert not (tmp_path / "out").exists()


@needs_fmnist
def test_pretrain_then_soup_write_their_files(tmp_path: Path, capsys) -> None:
    """The two commands end to end on real Fashion-MNIST, as small as they go."""
    start = tmp_path / "start"
    argv = ["--model", "mlp", "--epochs", "1", "--upstream-fraction", "0.01", "--out", str(start)]
    assert pretrain.main(argv) == 0
    record = json.loads((start / "pretrain.json").read_text())
    assert record["sizes"]["upstream_train"] > 0 and 0 <= record["held_out"]["accuracy"] <= 1
    argv = ["--start", str(start / "model.safetensors"), "--model", "mlp", "--ingredients", "2", "--seeds", "0,1",
            "--train-subset", "64", "--held-out", "50", "--test-subset", "50", "--epochs", "1", "--points", "3",
            "--out", str(tmp_path / "soup")]  # fmt: skip
    assert soup.main(argv) == 0
    result = json.loads((tmp_path / "soup" / "soup.json").read_text())
    assert set(result["arms"]) == set(soup_run.ARMS)
    assert len(result["comparisons"]) == len(soup_run.COMPARISONS) * len(soup_run.METRICS)
    assert "outside the pretraining's upstream share" in result["downstream"]
    assert result["start_sha256"] == hashlib.sha256((start / "model.safetensors").read_bytes()).hexdigest()
    assert_provenance(result["provenance"])
    assert result["argv"] == argv and result["out"] == str(tmp_path / "soup") and result["start_record"]["epochs"] == 1
    grid = {key: result["config"][key] for key in ("lr", "epochs", "augment", "label_smoothing")}
    for runs in result["arms"].values():  # each ingredient's recipe, the same in every arm of a seed
        assert [r["recipes"] for r in runs] == [[asdict(k) for k in soup_run.recipes(grid, 2, s)] for s in (0, 1)]
    assert {p.name for p in (tmp_path / "soup").iterdir()} == set(soup.OUTPUT_FILES)
    assert "| shared − independent | greedy_acc |" in (tmp_path / "soup" / "soup.md").read_text()
    code, err = run_main(soup.main, argv, capsys)
    assert code == 2 and "already holds" in err


def test_the_fusion_pages_commands_are_read_from_the_stored_results() -> None:
    """The page names the study a result came from (a result kept before the studies: the declared
    one, whose cells give its settings: tests/studies/test_fusion_studies.py) and the start's own recipe."""
    from studies.fusion import readings as fusion_page

    root = Path(__file__).resolve().parents[2]
    kept = json.loads((root / "docs" / "fusion" / "soup.json").read_text())
    cnn = {**kept, "config": {**kept["config"], "model": "cnn", "start": "runs/p/model.safetensors"}}
    before = fusion_page.study_commands("soup", cnn)
    assert before[0].endswith("its pretraining settings were not recorded beside these results")
    assert before[1:] == ["fedpfn study run studies/fusion/soup.toml", "fedpfn study page studies/fusion/soup.toml --trust-code"]
    record = asdict(pretrain.PretrainConfig(model="cnn", epochs=2))
    recorded = fusion_page.study_commands("soup", {**cnn, "study": "mine/soup-cnn.toml", "start_record": record})
    assert recorded == ["python -m fedpfn.experiments.pretrain --model cnn --epochs 2 --out runs/p",
                        "fedpfn study run mine/soup-cnn.toml", "fedpfn study page mine/soup-cnn.toml --trust-code"]  # fmt: skip
