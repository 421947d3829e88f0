"""Anchors' scope: whether a mask holds the classifier, the biases and the norm layers, on every model
family shipped, in `fedpfn run` (AnchorParams) and in the analysis commands (lmc, soup, cold).

With every switch at its default a mask is bit for bit the one drawn before the switches existed
(the digests below were taken from that code), so reference runs and stored results stand.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
import torch

from fedpfn.core.anchors import AnchorParams, AnchorScope, anchored_fraction, draw_mask, round_mask, scope_filled
from fedpfn.core.models import build_model
from fedpfn.experiments import cold, lmc, lmc_run, soup, soup_run
from fedpfn.experiments.command import build_parser, read_command_line
from tests.support.commands import run_main
from tests.support.idx import write_idx_set

# vgg11, BatchNorm too, is left out: resnet20 stands for it at a tenth of the draws
FAMILIES = {"mlp": (1, 28, 28), "cnn": (1, 28, 28), "resnet20": (3, 32, 32), "vit_tiny28": (1, 28, 28)}
# sha256 (first 16 digits) of draw_mask(model, 0.4, 3, granularity) per family, as drawn before the
# scope switches existed; the last column with include_classifier and include_norm off
BEFORE = {
    "mlp": ("ce65e8fb1cdd2e71", "bf347acad71f83e4", "b50e0678691146c8"),
    "cnn": ("6b16e0b5172ac640", "9996a52669b4547f", "e8133cd8dd0b9a77"),
    "resnet20": ("e05c65e9a75f1915", "7751326249c50319", "1b66e177c6a0c46a"),
    "vit_tiny28": ("03b25bc10a382c2f", "254d4f074744e69a", "432c28790f04a2f1"),
}
NORM_TYPES = (torch.nn.modules.batchnorm._NormBase, torch.nn.GroupNorm, torch.nn.LayerNorm)


def _model(name: str) -> torch.nn.Module:
    torch.manual_seed(0)
    return build_model(name, FAMILIES[name], 10)


def _digest(mask: dict[str, torch.Tensor]) -> str:
    h = hashlib.sha256()
    for name in sorted(mask):
        h.update(name.encode())
        h.update(mask[name].numpy().tobytes())
    return h.hexdigest()[:16]


def _kinds(model: torch.nn.Module) -> dict[str, set[str]]:
    """Parameter names by what they are: classifier, bias (not a norm's), norm (scale and shift)."""
    kinds: dict[str, set[str]] = {"classifier": set(), "bias": set(), "norm": set()}
    for module_name, module in model.named_modules():
        for local, _ in module.named_parameters(recurse=False):
            name = f"{module_name}.{local}" if module_name else local
            if module_name == "classifier":
                kinds["classifier"].add(name)
            if isinstance(module, NORM_TYPES):
                kinds["norm"].add(name)
            elif local == "bias":
                kinds["bias"].add(name)
    return kinds


@pytest.mark.parametrize("name", FAMILIES)
def test_default_masks_are_the_ones_drawn_before_the_switches(name: str) -> None:
    model = _model(name)
    weight, neuron, narrow = BEFORE[name]
    assert _digest(draw_mask(model, 0.4, 3, "weight")) == weight
    assert _digest(draw_mask(model, 0.4, 3, "neuron")) == neuron
    assert _digest(draw_mask(model, 0.4, 3, "weight", include_classifier=False, include_norm=False)) == narrow
    scope = AnchorScope()  # the analysis commands' defaults, and fedpfn run's
    assert _digest(draw_mask(model, 0.4, 3, "weight", **scope.mask_options())) == weight
    assert _digest(round_mask(model, AnchorParams(anchor_granularity="neuron"), 3)) == neuron


@pytest.mark.parametrize("granularity", ["weight", "neuron"])
@pytest.mark.parametrize("name", FAMILIES)
def test_a_switch_off_leaves_its_parameters_out_and_the_rest_as_drawn(name: str, granularity: str) -> None:
    model = _model(name)
    kinds = _kinds(model)
    assert kinds["classifier"] and kinds["bias"]  # every family has both; the MLP and the CNN no norm
    assert bool(kinds["norm"]) == (name in ("resnet20", "vit_tiny28"))
    full = draw_mask(model, 0.4, 3, granularity)
    for switch, kind in (("anchor_classifier", "classifier"), ("anchor_bias", "bias"), ("anchor_norm", "norm")):
        scope = AnchorScope(**{switch: False})
        mask = draw_mask(model, 0.4, 3, granularity, **scope.mask_options())
        assert not kinds[kind] & set(mask), (switch, kinds[kind] & set(mask))
        assert set(mask) == set(full) - kinds[kind] - (kinds["classifier"] if kind == "classifier" else set())
        assert abs(anchored_fraction(mask) - 0.4) < 0.05  # what is left is anchored at the ratio
    no_bias = draw_mask(model, 0.4, 3, granularity, include_bias=False)
    assert all(torch.equal(no_bias[n], full[n]) for n in no_bias)  # drawn and dropped: the rest unchanged
    for kind in ("classifier", "bias", "norm"):  # switched on, each kind is anchored at the ratio too
        entries = [full[n] for n in kinds[kind]]
        if entries and granularity == "weight" and sum(e.numel() for e in entries) > 500:
            assert abs(sum(int(e.sum()) for e in entries) / sum(e.numel() for e in entries) - 0.4) < 0.06, kind


def test_fedpfn_run_records_anchor_bias_only_where_it_is_off() -> None:
    from fedpfn.cli.simulate import checked_config, parse_args

    default = checked_config(parse_args(["--algorithm", "fedpfn"])).to_dict()
    assert "fedpfn.anchor_bias" not in default and default["fedpfn.anchor_classifier"] is True  # reads as before
    off = checked_config(parse_args(["--algorithm", "fedpfn", "--no-anchor-bias"]))
    assert off.to_dict()["fedpfn.anchor_bias"] is False
    params = off.hyper("fedpfn", AnchorParams)
    mask = round_mask(_model("cnn"), params, 5)
    assert "fc.bias" not in mask and "fc.weight" in mask


def test_analysis_settings_take_the_scope_and_record_it(tmp_path: Path) -> None:
    for module, settings in ((lmc, lmc.LmcConfig), (soup, soup.SoupConfig)):
        parser = build_parser("prog", module.__doc__, settings, "files")
        argv = ["--no-anchor-classifier", "--no-anchor-bias", "--anchor-norm", "--out", str(tmp_path / "o")]
        cfg, _, given, _ = read_command_line(parser, settings, ("x.json",), argv)
        assert (cfg.anchor_classifier, cfg.anchor_bias, cfg.anchor_norm) == (False, False, True)
        assert {"anchor_classifier", "anchor_bias", "anchor_norm"} <= given
        assert "a fresh or randomly initialised head is then anchored" in " ".join(parser.format_help().split())
    cfg = cold.ColdConfig(start="s.safetensors", anchor_norm=False)  # ColD's runs: their flags and read back
    assert not hasattr(cfg, "anchor_classifier")
    assert cfg.run_flags() == ["--no-anchor-norm"] and cold.ColdConfig().run_flags() == []
    assert cold.run_flags(cfg, "shared", 0)[-1] == "--no-anchor-norm"
    assert "--no-anchor-norm" not in cold.run_flags(cfg, "plain", 0)
    shared = {"algorithm": "fedpfn", "fedpfn.anchor_masks": "shared", "fedpfn.anchor_norm": False}
    assert cold.settings_of_run(shared)["anchor_norm"] is False and "anchor_norm" not in cold.settings_of_run({})


def test_the_arms_draw_their_masks_within_the_scope() -> None:
    model = _model("cnn")
    scope = AnchorScope(anchor_classifier=False, anchor_bias=False)
    for masks in (
        lmc_run.masks_for(lmc_run.Arm("shared", 0.4), model, 2, 0, "weight", scope),
        lmc_run.masks_for(lmc_run.Arm("independent", 0.4), model, 2, 0, "weight", scope),
        soup_run.masks_for("shared", model, 2, 0, 0.4, "weight", scope),
        soup_run.masks_for("independent", model, 2, 0, 0.4, "weight", scope),
    ):
        assert all(set(m) == {"features.0.weight", "features.3.weight", "features.6.weight", "fc.weight"} for m in masks)
    default = lmc_run.masks_for(lmc_run.Arm("shared", 0.4), model, 1, 0, "weight")[0]
    assert "classifier.bias" in default


def test_cold_reads_runs_written_before_the_scope_with_default_scope(tmp_path: Path) -> None:
    before = {"algorithm": "fedpfn", "anchor_masks": "shared", "anchor_ratio": 0.4}  # a run from before the scope
    assert {k: cold.settings_of_run(before)[k] for k in ("anchor_bias", "anchor_norm")} == {
        "anchor_bias": True, "anchor_norm": True}
    assert cold.settings_of_run({**before, "fedpfn.anchor_bias": False})["anchor_bias"] is False
    assert scope_filled({"anchor_norm": False}, lmc.LmcConfig) == {
        "anchor_bias": True, "anchor_norm": False, "anchor_classifier": True
    }  # fmt: skip
    assert scope_filled({}, cold.ColdConfig) == {"anchor_bias": True, "anchor_norm": True}


def test_a_scope_switch_is_refused_only_where_the_model_lacks_its_parameters() -> None:
    assert lmc.unused_problems(lmc.LmcConfig(model="resnet20"), {"anchor_norm", "anchor_bias"}) == []
    assert lmc.unused_problems(lmc.LmcConfig(model="mlp"), {"anchor_classifier", "anchor_bias"}) == []
    assert lmc.unused_problems(lmc.LmcConfig(model="mlp"), {"anchor_norm"}) == [
        "anchor_norm: mlp has no norm layer, so it would change nothing; drop it"
    ]
    no_anchors = lmc.LmcConfig(model="mlp", arms=("plain",))  # one line for the setting, not two
    assert lmc.unused_problems(no_anchors, {"anchor_norm"}) == ["anchor_norm: no shared or independent arm uses it; drop it"]


@pytest.mark.parametrize(
    "main, argv, says",
    [
        (lmc.main, ["--arms", "plain,diff-init", "--no-anchor-bias"], "anchor_bias: no shared or independent arm"),
        (lmc.main, ["--arms", "plain", "--anchor-classifier"], "anchor_classifier: no shared or independent arm"),
        (lmc.main, ["--model", "cnn", "--no-anchor-norm"], "anchor_norm: cnn has no norm layer, so it would change"),
        (soup.main, ["--model", "mlp", "--anchor-norm"], "anchor_norm: mlp has no norm layer"),
        (cold.main, ["--no-anchor-norm"], "unknown flag --no-anchor-norm"),  # the runs' (studies/fusion/cold.toml), read off them
        (lmc.main, ["--anchor-norm=no"], "--anchor-norm"),
        (soup.main, ["--anchor-bias", "maybe"], "maybe"),
        (cold.main, ["--no-anchor-classifier"], "unknown flag --no-anchor-classifier"),
    ],
)
def test_a_scope_flag_the_run_would_not_use_or_a_bad_value_is_one_line(
    main, argv: list[str], says: str, tmp_path: Path, capsys
) -> None:
    code, err = run_main(main, [*argv, "--out", str(tmp_path / "out")], capsys)
    lines = [line for line in err.splitlines() if says in line]
    assert code == 2 and len(lines) == 1 and err.startswith("error: "), err
    assert not (tmp_path / "out").exists()


@pytest.mark.usefixtures("one_torch_thread")
def test_lmc_json_records_the_scope_its_masks_had(tmp_path: Path, capsys) -> None:
    """One tiny gate run on synthetic images: the scope is in lmc.json's settings and in its anchored fraction."""
    write_idx_set(tmp_path / "data", n_train=60, n_test=10)
    argv = ["--data-root", str(tmp_path / "data"), "--arms", "plain,shared", "--seeds", "0", "--epochs", "1",
            "--width", "8", "--points", "3", "--matchers", "full", "--bn-batches", "0", "--where", "test",
            "--no-anchor-classifier", "--no-anchor-bias", "--device", "cpu", "--out", str(tmp_path / "o")]  # fmt: skip
    assert lmc.main(argv) == 0, capsys.readouterr().err
    result = json.loads((tmp_path / "o" / "lmc.json").read_text())
    config = result["config"]
    assert (config["anchor_classifier"], config["anchor_bias"], config["anchor_norm"]) == (False, False, True)
    fraction = result["settings"]["shared-0.4"]["seeds"][0]["anchored_fraction"]
    model = build_model("mlp", (1, 28, 28), 10, width=8)
    mask = draw_mask(model, 0.4, 1, "weight", **AnchorScope(anchor_classifier=False, anchor_bias=False).mask_options())
    assert set(mask) == {"features.1.weight", "features.3.weight"} and abs(fraction - 0.4) < 0.1
