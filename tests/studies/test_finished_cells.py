"""A study that runs across sessions (scripts/finished_cells.py and .gitignore): a finished cell's
settings, metrics and summary (an lmc cell's lmc.json) are listed to commit and are not ignored, its
checkpoint, models, figure and log are ignored; a cell begun but not finished is never listed; the
committed files alone let `fedpfn study run` reuse the cell (its settings compared first), and a bad
study file is refused in one line."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from fedpfn.cli.study import configure
from fedpfn.study.cells import main_cells
from fedpfn.study.commands import RunCells
from fedpfn.study.spec import load
from scripts import finished_cells

ROOT = Path(__file__).parents[2]
STUDY = """
title = "across sessions"
runs = "studies/demo/cells"
seeds = [0, 1]
shared = "--dataset fmnist --model mlp --num-clients 20 --clients-per-round 4 --rounds 2"
[arms]
fedavg = "--algorithm fedavg"
"""


def test_only_finished_cells_are_listed_and_only_their_small_files(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    Path("s.toml").write_text(STUDY)
    done, begun = (cell.folder for cell in main_cells(load("s.toml")))
    for folder in (done, begun):
        folder.mkdir(parents=True)
        for name in ("config.json", "metrics.jsonl", "checkpoint.npz", "model_round_2.pt"):
            (folder / name).write_text("{}")
    (done / "summary.json").write_text("{}")
    (done.parents[1] / "cpu.jsonl").write_text("")
    listed = finished_cells.finished_files("s.toml")
    assert listed == [done / "config.json", done / "metrics.jsonl", done / "summary.json", done.parents[1] / "cpu.jsonl"]


@pytest.mark.parametrize(("path", "ignored"), [
    ("studies/demo/cells/main/fedavg/s0/config.json", False), ("studies/demo/cells/a0.1/fedavg/s0/metrics.jsonl", False),
    ("studies/demo/cells/fedavg/s0/summary.json", False), ("studies/demo/cells/cpu.jsonl", False),
    ("studies/demo/cells/fedavg/s0/checkpoint.npz", True), ("studies/demo/cells/fedavg/s0/model_round_2.pt", True),
    ("studies/demo/cells/fedavg/s0/clients.jsonl", True), ("studies/demo/cells/fedavg/s0/run.log", True),
    ("studies/demo/cells/cnn/seed0/lmc.json", False), ("studies/demo/cells/cnn/seed0/lmc.png", True),
    ("studies/demo/cells/cnn/seed0/lmc.pdf", True), ("studies/demo/cells/cnn/seed0/lmc.log", True),
])  # fmt: skip
def test_git_keeps_what_a_reuse_reads_and_ignores_the_rest(path: str, ignored: bool) -> None:
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    found = subprocess.run(["git", "check-ignore", "-q", "--no-index", path], cwd=ROOT)
    assert found.returncode == (0 if ignored else 1)


def test_a_finished_cell_of_only_its_kept_files_is_reused(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    Path("s.toml").write_text(STUDY)
    spec = load("s.toml")
    cell = main_cells(spec)[0]
    cfg = RunCells(configure).configure(list(cell.flags), cell.seeds, cell.folder)
    cell.folder.mkdir(parents=True)
    (cell.folder / "config.json").write_text(json.dumps(cfg.to_dict()))
    (cell.folder / "summary.json").write_text("{}")
    assert RunCells(configure).state(cfg, cell.folder) == "done"
    (cell.folder / "config.json").write_text(json.dumps({**cfg.to_dict(), "rounds": 3}))  # other settings: never reused
    assert RunCells(configure).state(cfg, cell.folder).startswith("refused: ")


def test_a_bad_study_is_refused_in_one_line(tmp_path: Path, capsys) -> None:
    assert finished_cells.main([str(tmp_path / "absent.toml")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: study: ") and err.count("\n") == 1


LMC_STUDY = """
command = "lmc"
runs = "studies/demo/cells"
cell = "{arm}/seed{seed}"
seeds = [0, 1]
shared = "--dataset fmnist --models 2 --device cpu"
[arms]
cnn = "--model cnn --lr 0.1"
"""


def test_a_finished_lmc_cell_is_its_lmc_json_which_alone_lets_it_be_reused(tmp_path: Path, monkeypatch) -> None:
    """An lmc cell is finished once its lmc.json is written (its figure and log stay local); one begun
    and killed left none and is not listed; the committed lmc.json alone makes `status` call it done."""
    from fedpfn.study.cells import command_of, config_of
    from fedpfn.study.commands import settings_of
    from fedpfn.study.lmc_cells import RESULT

    assert finished_cells.LMC == RESULT
    monkeypatch.chdir(tmp_path)
    Path("s.toml").write_text(LMC_STUDY)
    spec = load("s.toml")
    cell, other = main_cells(spec)
    done, begun = cell.folder, other.folder
    for folder in (done, begun):
        folder.mkdir(parents=True)
        (folder / "lmc.log").write_text("")
    cfg = config_of(spec, cell, configure)
    (done / "lmc.json").write_text(json.dumps({"config": settings_of(cfg.settings), "settings": {}}))
    (done / "lmc.png").write_text("")
    assert finished_cells.finished_files("s.toml") == [done / "lmc.json"]
    assert command_of("lmc", configure).state(cfg, done) == "done"
