"""A study whose cells are `python -m fedpfn.experiments.lmc` runs (`command = "lmc"`): status says
missing then done, run runs a missing cell and reuses a finished one, a cell whose lmc.json holds
other settings is refused in one line (exit 2), a cell written before the anchors' scope settings
counts as their defaults, and a flag the command refuses is one line before anything runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fedpfn.cli.main import main as fedpfn
from fedpfn.cli.study import configure
from fedpfn.core.data import find_data_problem
from fedpfn.runtime.runfolder import RunFolder
from fedpfn.study.cells import config_of, main_cells
from fedpfn.study.commands import settings_of
from fedpfn.study.lmc_cells import LmcCells
from fedpfn.study.spec import load

needs_fmnist = pytest.mark.skipif(find_data_problem("fmnist", None, False) is not None,
                                  reason="Fashion-MNIST not installed")  # fmt: skip
TINY = """command = "lmc"
runs = "runs/gate"
cell = "{arm}/seed{seed}"
seeds = [0]
shared = "--dataset fmnist --models 2 --arms plain,shared --matchers full --train-subset 200 --epochs 1 --points 3 --bn-batches 0 --device cpu"

[arms]
mlp8 = "--model mlp --width 8 --split same-data --lr 0.1"
"""
SCOPE = ("anchor_classifier", "anchor_bias", "anchor_norm")


def study(tmp_path: Path, monkeypatch, text: str = TINY) -> str:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "gate.toml").write_text(text)
    return "gate.toml"


@needs_fmnist
def test_an_lmc_study_runs_its_cell_reuses_it_and_refuses_one_of_other_settings(tmp_path: Path, monkeypatch,
                                                                               capsys) -> None:  # fmt: skip
    name = study(tmp_path, monkeypatch)
    assert fedpfn(["study", "status", name]) == 0
    assert capsys.readouterr().out.splitlines() == ["runs/gate/mlp8/seed0  missing",
                                                    "1 cells: 1 missing; 1 cells left; the time left is known once a "
                                                    "cell has finished"]  # fmt: skip
    assert fedpfn(["study", "run", name]) == 0
    result = tmp_path / "runs/gate/mlp8/seed0/lmc.json"
    written = json.loads(result.read_text())
    assert written["config"]["seeds"] == [0] and written["config"]["width"] == 8 and written["config"]["threads"] == 1
    assert sorted(p.name for p in result.parent.iterdir()) == ["lmc.json", "lmc.pdf", "lmc.png"]  # no lock left
    capsys.readouterr()
    before = result.read_bytes()
    assert fedpfn(["study", "run", name]) == 0
    assert "runs/gate/mlp8/seed0: finished earlier with the same settings, reused" in capsys.readouterr().out
    assert result.read_bytes() == before
    assert fedpfn(["study", "status", name]) == 0
    assert capsys.readouterr().out.splitlines()[0] == "runs/gate/mlp8/seed0  done"
    result.write_text(json.dumps({**written, "config": {**written["config"], "lr": 0.5}}))
    assert fedpfn(["study", "run", name]) == 2
    out, err = capsys.readouterr()
    assert err == ("error: study: runs/gate/mlp8/seed0/lmc.json holds other settings (lr); move it away to run the "
                   "cell again\n")
    assert "==" not in out


def test_a_cell_from_before_the_scope_settings_is_done_and_one_of_other_settings_is_refused(tmp_path: Path,
                                                                                           monkeypatch) -> None:  # fmt: skip
    spec = load(study(tmp_path, monkeypatch))
    cell = main_cells(spec)[0]
    planned = config_of(spec, cell, configure)
    wanted = json.loads(json.dumps(planned.settings.__dict__))
    assert set(SCOPE) <= set(wanted)
    lmc = LmcCells()
    assert lmc.state(planned, cell.folder) == "missing"  # a killed cell left no lmc.json: run again

    def plant(config: dict) -> str:
        cell.folder.mkdir(parents=True, exist_ok=True)
        (cell.folder / "lmc.json").write_text(json.dumps({"config": config}))
        return lmc.state(planned, cell.folder)

    assert plant({k: v for k, v in wanted.items() if k not in SCOPE}) == "done"
    assert plant({**wanted, "anchor_bias": False}).endswith("holds other settings (anchor_bias); move it away to "
                                                            "run the cell again")  # fmt: skip


def test_run_arm_runs_only_that_arms_cells_beside_a_run_of_another(tmp_path: Path, monkeypatch, capsys) -> None:
    """`--arm` selects the cells; a cell of another arm being run now (its folder's lock held) does not stop it,
    as it stops a run over every arm; an arm the study does not declare is one line, exit 2."""
    name = study(tmp_path, monkeypatch, TINY + 'mlp16 = "--model mlp --width 16 --split same-data --lr 0.1"\n')
    spec = load(name)
    for cell in main_cells(spec):  # both cells finished: run reuses them, nothing trains
        cell.folder.mkdir(parents=True)
        config = settings_of(config_of(spec, cell, configure).settings)
        (cell.folder / "lmc.json").write_text(json.dumps({"config": config}))
    busy = tmp_path / "runs/gate/mlp16/seed0"
    (busy / "lmc.json").rename(tmp_path / "kept.json")
    with RunFolder(busy).exclusive():
        assert fedpfn(["study", "run", name, "--arm", "mlp8"]) == 0
        out = capsys.readouterr().out
        assert "runs/gate/mlp8/seed0: finished earlier with the same settings, reused" in out and "mlp16" not in out
        assert fedpfn(["study", "run", name]) == 2
        assert "runs/gate/mlp16/seed0 is being run by another process now" in capsys.readouterr().err
    assert fedpfn(["study", "run", name, "--arm", "mlp32"]) == 2
    assert capsys.readouterr().err == ("error: study: gate.toml: --arm mlp32: not an arm of the study (declared: mlp8, "
                                       "mlp16)\n")  # fmt: skip


@pytest.mark.parametrize(("flags", "said"), [
    ("--widht 8", "unknown flag --widht"),
    ("--width -1", "width"),
    ("--seeds 3", "--seeds is the study's to set"),
])  # fmt: skip
def test_a_flag_the_command_refuses_is_one_line_before_anything_runs(flags: str, said: str, tmp_path: Path,
                                                                     monkeypatch, capsys) -> None:  # fmt: skip
    name = study(tmp_path, monkeypatch, TINY.replace('--lr 0.1"', f'--lr 0.1 {flags}"'))
    assert fedpfn(["study", "run", name]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.startswith("error: study: ") and said in err and err.count("\n") == 1
    assert not (tmp_path / "runs").exists()


def test_an_lmc_study_without_a_reading_has_no_page_and_an_unknown_command_is_refused(tmp_path: Path, monkeypatch,
                                                                                    capsys) -> None:  # fmt: skip
    name = study(tmp_path, monkeypatch, TINY.replace('command = "lmc"', 'command = "nosuch"'))
    assert fedpfn(["study", "status", name]) == 2
    assert capsys.readouterr().err == "error: study: gate.toml: command = 'nosuch' is not accepted (accepted: run, lmc, soup)\n"
    name = study(tmp_path, monkeypatch, TINY + "[page]\nout = 'p.md'\nstored = 'p.json'\ntext = 'x'\n")
    assert fedpfn(["study", "page", "--stored", name]) == 2
    assert "needs readings of its own (page.readings" in capsys.readouterr().err and not (tmp_path / "p.md").exists()
