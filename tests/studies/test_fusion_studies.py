"""The soup and ColD fusion studies (studies/fusion/soup.toml, studies/fusion/cold.toml): their cells give the
settings their kept results hold, a bad start or a cell of other settings is refused in one line
before anything runs, the soup cells' seeds join into the result one command over them writes,
and `fedpfn cold` evaluates finished runs only (it starts none). Nothing here trains."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from safetensors.torch import save_file

from fedpfn.cli.main import main as fedpfn
from fedpfn.cli.study import configure
from fedpfn.core.models import build_model
from fedpfn.experiments import cold
from fedpfn.experiments.soup_run import compare_arms
from fedpfn.study.cells import config_of, main_cells
from fedpfn.study.commands import settings_of
from fedpfn.study.spec import load
from studies.fusion.readings import joined_soups

ROOT = Path(__file__).resolve().parents[2]
STORED = {kind: json.loads((ROOT / "docs" / "fusion" / f"{kind}.json").read_text()) for kind in ("soup", "cold")}


def study_here(tmp_path: Path, monkeypatch, kind: str) -> Path:
    """A folder holding the study file and a start of the study's model where the study names it."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "studies" / "fusion").mkdir(parents=True)
    shutil.copy(ROOT / "studies" / "fusion" / f"{kind}.toml", tmp_path / "studies" / "fusion")
    start = Path(STORED[kind]["config"]["start"])
    start.parent.mkdir(parents=True)
    model = build_model(STORED[kind]["config"]["model"], (1, 28, 28), 10)
    save_file({n: t.contiguous() for n, t in model.state_dict().items()}, start)
    return start


def test_the_cold_studys_runs_are_run_flags_of_its_kept_settings_and_read_back_to_them(tmp_path: Path, monkeypatch) -> None:
    """Each cell's `fedpfn run` config equals the one cold.run_flags gives for the kept cold.json's
    settings (so runs made before the study are its cells), and settings_of_run reads them back."""
    study_here(tmp_path, monkeypatch, "cold")
    spec = load("studies/fusion/cold.toml")
    kept = STORED["cold"]["config"]
    cfg = cold.ColdConfig(**{**kept, "seeds": tuple(kept["seeds"])})
    cells = main_cells(spec)
    assert sorted((c.arm, c.seed) for c in cells) == sorted((a, s) for a in cold.FUSED for s in kept["seeds"])
    for cell in cells:
        ours = config_of(spec, cell, configure).to_dict()
        theirs = configure([*cold.run_flags(cfg, cell.arm, cell.seed), "--out", str(cell.folder)]).to_dict()
        assert ours == theirs, cell.label()
        assert cold.arm_of(ours) == cell.arm
        back = cold.settings_of_run(ours)
        assert back == {k: v for k, v in {**asdict_of(cfg), "anchor_bias": True, "anchor_norm": True}.items() if k in back}
    assert spec.page is not None and spec.page.evaluate == ("--test-subset", str(kept["test_subset"]))


def asdict_of(cfg: cold.ColdConfig) -> dict:
    return json.loads(json.dumps(cfg.__dict__))


def test_the_cold_study_refuses_a_bad_start_in_one_line_before_any_run(tmp_path: Path, monkeypatch, capsys) -> None:
    start = study_here(tmp_path, monkeypatch, "cold")
    start.write_bytes(b"no weights here" * 10)
    assert fedpfn(["study", "run", "studies/fusion/cold.toml"]) == 2
    out, err = capsys.readouterr()
    assert len(err.splitlines()) == 1 and out == "", (out, err)
    assert err.startswith(f"error: study: studies/fusion/cold.toml: plain seed 0: init: '{start}' is not a readable safetensors file")
    assert not Path("runs/cold-cnn-fmnist").exists()


def test_the_soup_studys_cells_give_the_kept_settings_seed_by_seed(tmp_path: Path, monkeypatch) -> None:
    study_here(tmp_path, monkeypatch, "soup")
    spec = load("studies/fusion/soup.toml")
    kept = STORED["soup"]["config"]
    for cell in main_cells(spec):
        settings = settings_of(config_of(spec, cell, configure).settings)
        assert settings == {**kept, "seeds": [cell.seed], **{k: v for k, v in settings.items() if k not in kept}}
        assert cell.folder == Path(f"runs/soup-vit_tiny28-fmnist/s{cell.seed}")


def test_a_finished_soup_cell_is_reused_and_one_of_other_settings_refused_in_one_line(tmp_path: Path, monkeypatch,
                                                                                     capsys) -> None:  # fmt: skip
    study_here(tmp_path, monkeypatch, "soup")
    spec = load("studies/fusion/soup.toml")
    cells = main_cells(spec)
    for cell in cells:
        wanted = settings_of(config_of(spec, cell, configure).settings)
        cell.folder.mkdir(parents=True)
        (cell.folder / "soup.json").write_text(json.dumps({"config": wanted, "seconds": 60.0}))
    assert fedpfn(["study", "run", "studies/fusion/soup.toml"]) == 0  # every cell reused: nothing trains
    assert capsys.readouterr().out.count("finished earlier with the same settings, reused") == len(cells)
    changed = {**json.loads((cells[1].folder / "soup.json").read_text()), "seconds": 1.0}
    changed["config"]["lr"] = [0.1]
    (cells[1].folder / "soup.json").write_text(json.dumps(changed))
    before = {c.folder: (c.folder / "soup.json").read_bytes() for c in cells}
    assert fedpfn(["study", "run", "studies/fusion/soup.toml"]) == 2
    err = capsys.readouterr().err
    assert err == (f"error: study: {cells[1].folder / 'soup.json'} holds other settings (lr); move it away to run "
                   "the cell again\n")  # fmt: skip
    assert {c.folder: (c.folder / "soup.json").read_bytes() for c in cells} == before


def test_the_soup_cells_seeds_join_into_the_result_one_command_over_them_wrote() -> None:
    """The kept soup.json cut into its seeds, one cell each, and joined: the same arms and comparisons."""
    kept = {**STORED["soup"], "arms": {arm: [{"ensemble_acc": r["mean_ingredient_acc"], **r} for r in rows]
                                          for arm, rows in STORED["soup"]["arms"].items()}}  # kept before ensembles  # fmt: skip
    cells = [{**kept, "config": {**kept["config"], "seeds": [seed]},
              "arms": {arm: [rows[i]] for arm, rows in kept["arms"].items()}, "seconds": kept["seconds"] / 3}
             for i, seed in enumerate(kept["config"]["seeds"])]  # fmt: skip
    joined = joined_soups(cells)
    assert joined["config"] == kept["config"] and joined["arms"] == kept["arms"]
    assert joined["comparisons"] == compare_arms(kept["arms"])
    assert joined["seconds"] == pytest.approx(kept["seconds"])


@pytest.mark.parametrize(
    "argv, says",
    [
        ([], "runs: give the folder of the study's runs"),
        (["--runs", "nowhere"], "runs: nowhere is not a folder"),
        (["--runs", "."], "runs: plain/s0 holds no readable config.json"),
        (["--runs", ".", "--seeds", "2,2"], "seeds: 2,2 repeats a seed"),
        (["--runs", ".", "--probe-lr", "-1"], "probe_lr: -1.0 must be > 0"),
        (["--runs", ".", "--start", "x"], "unknown flag --start"),
    ],
)
def test_fedpfn_cold_refuses_in_one_line_before_anything_is_read_or_written(argv: list[str], says: str,
                                                                            tmp_path: Path, monkeypatch, capsys) -> None:  # fmt: skip
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(cold, "evaluate_study", lambda *_: pytest.fail("evaluated"))
    try:
        code = fedpfn(["cold", *argv, "--out", "out"])
    except SystemExit as stop:  # argparse's own refusal
        code = stop.code
    err = capsys.readouterr().err
    assert code == 2 and len(err.splitlines()) == 1 and says in err, err
    assert not (tmp_path / "out").exists()


def test_a_cold_run_of_another_arm_or_other_settings_is_named(tmp_path: Path) -> None:
    """The runs are read before any evaluation: a folder holding the wrong arm, or a run of other
    settings than the others, is one line naming it."""
    config = {"partition": "tasks", "personal": "classifier.*", "algorithm": "fedavg", "init": "s.safetensors",
              "model": "cnn", "num_clients": 8, "rounds": 2, "local_epochs": 1, "lr": 0.01, "batch_size": 64,
              "validation_fraction": 0.5, "data_root": None}  # fmt: skip
    anchored = {"algorithm": "fedpfn", "fedpfn.anchor_ratio": 0.4, "fedpfn.anchor_granularity": "weight"}
    for arm, extra in (("plain", {}), ("shared", {**anchored, "fedpfn.anchor_masks": "shared"}),
                       ("independent", {**anchored, "fedpfn.anchor_masks": "client"})):  # fmt: skip
        folder = tmp_path / arm / "s0"
        folder.mkdir(parents=True)
        (folder / "config.json").write_text(json.dumps({**config, **extra, "seed": 0}))
        (folder / "summary.json").write_text("{}")
    settings = cold.ColdEval(runs=str(tmp_path), seeds=(0,))
    cfg, found = cold.read_settings(tmp_path, settings)
    assert found == [] and cfg is not None and (cfg.contributors, cfg.anchor_ratio, cfg.unseen_fraction) == (8, 0.4, 0.5)
    (tmp_path / "independent" / "s0" / "config.json").write_text(json.dumps({**config, **anchored, "seed": 0,
                                                                             "fedpfn.anchor_masks": "client", "lr": 0.1}))  # fmt: skip
    assert cold.read_settings(tmp_path, settings)[1] == [
        f"runs: {tmp_path / 'independent' / 's0'} ran with other settings than the study's other runs (differing: lr)"]
    for arm in cold.FUSED:  # six contributors each: what `fedpfn run` takes, ColD does not
        changed = {**json.loads((tmp_path / arm / "s0" / "config.json").read_text()), "num_clients": 6, "lr": 0.01}
        (tmp_path / arm / "s0" / "config.json").write_text(json.dumps(changed))
    assert cold.read_settings(tmp_path, settings) == (None, [
        "contributors: 6 (the runs' --num-clients) leaves the 4 tasks uneven; run the study with a multiple of 4"])
    (tmp_path / "shared" / "s0" / "config.json").write_text(json.dumps({**config, "seed": 0}))
    assert f"runs: {tmp_path / 'shared' / 's0'} is a plain run, not ColD's shared arm" in cold.read_settings(tmp_path, settings)[1]


TINY_SOUPS = """title = "tiny soups"
command = "soup"
runs = "runs/soup"
cell = "s{seed}"
seeds = [0, 1]
[arms]
mlp = "--model mlp --start start.safetensors --ingredients 2 --epochs 1 --train-subset 100 --held-out 50 --test-subset 100 --points 3 --device cpu"
[page]
out = "docs/fusion.md"
stored = "docs/fusion/soup.json"
template = "studies/fusion/fusion.md"
readings = "studies.fusion.readings:SOUP"  # the study's own readings (fedpfn.study.readings): fedpfn study page --trust-code
"""  # fmt: skip


@pytest.mark.usefixtures("one_torch_thread")
def test_a_tiny_soup_study_runs_its_cells_in_process_and_writes_the_page_twice_alike(tmp_path: Path, monkeypatch,
                                                                                   capsys) -> None:  # fmt: skip
    """Two seeds of two 100-sample fine-tunes each: run, run again (reused), the page from the cells
    (the seeds joined), and --stored from the kept results alone, byte for byte."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "studies" / "fusion").mkdir(parents=True)
    (tmp_path / "studies" / "fusion" / "soup.toml").write_text(TINY_SOUPS)
    shutil.copy(ROOT / "studies" / "fusion" / "fusion.md", tmp_path / "studies" / "fusion")
    (tmp_path / "docs" / "fusion").mkdir(parents=True)
    shutil.copy(ROOT / "docs" / "fusion" / "cold.json", tmp_path / "docs" / "fusion")  # the page's other half
    save_file(build_model("mlp", (1, 28, 28), 10).state_dict(), tmp_path / "start.safetensors")
    assert fedpfn(["study", "run", "studies/fusion/soup.toml"]) == 0
    assert all((tmp_path / "runs" / "soup" / f"s{seed}" / "soup.json").is_file() for seed in (0, 1))
    capsys.readouterr()
    assert fedpfn(["study", "run", "studies/fusion/soup.toml"]) == 0
    assert capsys.readouterr().out.count("reused") == 2
    assert fedpfn(["study", "page", "studies/fusion/soup.toml", "--trust-code"]) == 0
    kept = json.loads((tmp_path / "docs" / "fusion" / "soup.json").read_text())
    assert kept["config"]["seeds"] == [0, 1] and [r["seed"] for r in kept["arms"]["shared"]] == [0, 1]
    assert kept["study"] == "studies/fusion/soup.toml" and len(kept["provenances"]) == 2
    page = (tmp_path / "docs" / "fusion.md").read_bytes()
    assert b"fedpfn study run studies/fusion/soup.toml" in page and b"2 seeds of K = 2 short fine-tunes of the mlp" in page
    (tmp_path / "docs" / "fusion.md").unlink()
    assert fedpfn(["study", "page", "--stored", "studies/fusion/soup.toml", "--trust-code"]) == 0
    assert (tmp_path / "docs" / "fusion.md").read_bytes() == page
