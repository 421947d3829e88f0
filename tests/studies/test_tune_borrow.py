"""A tuned setting an arm borrows (`[tune.borrow]`): the arm runs no tuning of its own and its main
runs take the value its lender's tuning chose, at each axes point; a borrow that names no tuning
arm is refused in one line before anything runs; the page's tuning table shows each score and
the choice, a borrowed one as its lender's."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fedpfn.study.cells import choices, main_cells, scores, tuning_cells
from fedpfn.study.page import tuning_table
from fedpfn.study.spec import StudyError, load

STUDY = """
title = "borrowed step"
runs = "runs/borrow"
seeds = [0, 1]
shared = "--dataset fmnist --model mlp --num-clients 20 --clients-per-round 4 --rounds 2"
[arms]
fedavg = "--algorithm fedavg"
fedpfn = "--algorithm fedpfn"
fedpfn-at-fedavg = "--algorithm fedpfn"
[axes]
alpha = ["0.1", "0.5"]
[tune]
flag = "--lr"
values = ["0.01", "0.1"]
flags = "--validation-fraction 0.1"
[tune.borrow]
fedpfn-at-fedavg = "fedavg"
"""
SCORES = {("fedavg", "0.1"): (0.7, 0.5), ("fedavg", "0.5"): (0.4, 0.8),  # fedavg picks 0.01 at α 0.1, 0.1 at 0.5
          ("fedpfn", "0.1"): (0.5, 0.7), ("fedpfn", "0.5"): (0.8, 0.4)}  # fedpfn the other way round  # fmt: skip


def plant_tuning(spec) -> None:
    """Every tuning run finished, scoring as SCORES says."""
    for cell in tuning_cells(spec):
        cell.folder.mkdir(parents=True)
        score = SCORES[cell.arm, dict(cell.point)["alpha"]][spec.tune.values.index(cell.value)]
        (cell.folder / "metrics.jsonl").write_text(json.dumps({"round": 1, "val_accuracy": score}) + "\n")
        (cell.folder / "summary.json").write_text("{}")


def test_a_borrowing_arm_takes_its_lenders_value_at_each_point(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    Path("s.toml").write_text(STUDY)
    spec = load("s.toml")
    cells = tuning_cells(spec)
    assert {c.arm for c in cells} == {"fedavg", "fedpfn"} and len(cells) == 2 * 2 * 2  # arms, points, values
    assert choices(spec) is None  # nothing tuned yet
    plant_tuning(spec)
    lr = {(c.arm, dict(c.point)["alpha"]): c.flags[c.flags.index("--lr") + 1] for c in main_cells(spec, choices(spec))}
    assert lr == {("fedavg", "0.1"): "0.01", ("fedavg", "0.5"): "0.1", ("fedpfn", "0.1"): "0.1", ("fedpfn", "0.5"): "0.01",
                  ("fedpfn-at-fedavg", "0.1"): "0.01", ("fedpfn-at-fedavg", "0.5"): "0.1"}  # fmt: skip


@pytest.mark.parametrize("borrow", ['x = "fedavg"', 'fedpfn-at-fedavg = "nobody"', 'fedpfn-at-fedavg = "fedpfn"\nfedpfn = "fedavg"'])
def test_a_borrow_of_no_tuning_arm_is_refused(tmp_path: Path, borrow: str) -> None:
    path = tmp_path / "s.toml"
    path.write_text(STUDY.replace('fedpfn-at-fedavg = "fedavg"', borrow))
    with pytest.raises(StudyError) as raised:
        load(path)
    message = str(raised.value)
    assert "\n" not in message and message.startswith(f"study: {path}: ")
    assert "unknown key 'x' in tune.borrow" in message or "is not an arm that tunes its own value" in message


def test_the_tuning_table_shows_each_score_and_the_borrowed_choice(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    Path("s.toml").write_text(STUDY)
    spec = load("s.toml")
    plant_tuning(spec)
    stored = {"chosen": [{"arm": a, "point": dict(p), "value": v} for (a, p), v in choices(spec).items()],
              "scores": [{"arm": a, "point": dict(p), "value": v, "score": s} for (a, p, v), s in scores(spec).items()]}
    lines = tuning_table(spec, stored)
    assert lines[0] == "| arm | axes | val_accuracy at --lr 0.01 | val_accuracy at --lr 0.1 | chosen |"
    assert "| fedavg | alpha=0.5 | 0.4000 | 0.8000 | 0.1 |" in lines
    assert "| fedpfn-at-fedavg | alpha=0.5 | 0.4000 | 0.8000 | 0.1 (fedavg's) |" in lines
    assert "| fedpfn | alpha=0.1 | 0.5000 | 0.7000 | 0.1 |" in lines
