"""A family whose comparisons each have their own baseline (`pairs = [[arm, baseline], ...]`): one
question asked of several algorithms (X+anchors − X for each X) is one Holm family, counted as its
rows, and one arm may meet two baselines in it; a family that gives pairs and a baseline too, pairs
an arm with itself or with no arm, or gives a pair twice, is refused in one line."""

from __future__ import annotations

from pathlib import Path

import pytest

from fedpfn.study.page import family_rows
from fedpfn.study.spec import StudyError, load

STUDY = """
title = "anchors beside two algorithms"
seeds = [0, 1, 2]
shared = "--dataset fmnist --model mlp --rounds 2"
[arms]
prox = "--algorithm fedprox"
prox-anchors = "--algorithm fedpfn+fedprox"
dyn = "--algorithm feddyn"
dyn-anchors = "--algorithm fedpfn+feddyn"
[axes]
alpha = ["0.1", "0.5"]
[endpoints.acc]
metric = "test_accuracy"
[families.anchors]
endpoint = "acc"
pairs = [["prox-anchors", "prox"], ["dyn-anchors", "dyn"]]
"""
GAIN = {"prox": 0.0, "prox-anchors": 0.02, "dyn": 0.5, "dyn-anchors": 0.49}  # anchors +2 points beside prox, −1 beside dyn


def stored() -> dict:
    """Each cell's endpoint: the arm's level plus a seed's wobble (so each pair has a spread)."""
    return {"cells": [{"arm": arm, "seed": seed, "point": {"alpha": alpha},
                       "endpoints": {"acc": 0.5 + level + 0.001 * seed * (arm.endswith("anchors"))}}
                      for alpha in ("0.1", "0.5") for arm, level in GAIN.items() for seed in (0, 1, 2)]}  # fmt: skip


def test_each_arm_is_compared_with_its_own_baseline_in_one_holm_family(tmp_path: Path) -> None:
    (tmp_path / "s.toml").write_text(STUDY)
    spec = load(tmp_path / "s.toml")
    assert spec.families["anchors"].heading == "anchors: each arm against its own baseline"
    rows = family_rows(spec, stored(), "anchors")
    assert [r.label for r in rows] == ["alpha=0.1: prox-anchors − prox", "alpha=0.1: dyn-anchors − dyn",
                                       "alpha=0.5: prox-anchors − prox", "alpha=0.5: dyn-anchors − dyn"]  # fmt: skip
    assert [round(100 * r.mean, 1) for r in rows] == [2.1, -0.9, 2.1, -0.9]  # each against its own, not the first arm
    p = sorted(r.p_value for r in rows)
    assert sorted(r.p_holm for r in rows) == pytest.approx([min(1.0, 4 * p[0]), min(1.0, max(4 * p[0], 3 * p[1])),
                                                           min(1.0, max(4 * p[0], 3 * p[1], 2 * p[2])),
                                                           min(1.0, max(4 * p[0], 3 * p[1], 2 * p[2], p[3]))])  # fmt: skip


def test_one_arm_may_meet_two_baselines_in_one_family(tmp_path: Path) -> None:
    (tmp_path / "s.toml").write_text(STUDY.replace('["dyn-anchors", "dyn"]]', '["prox-anchors", "dyn"]]'))
    spec = load(tmp_path / "s.toml")
    assert spec.families["anchors"].arms == ("prox-anchors",)
    rows = family_rows(spec, stored(), "anchors")
    assert [round(100 * r.mean, 1) for r in rows] == [2.1, -47.9, 2.1, -47.9]


@pytest.mark.parametrize(("change", "said"), [
    ("pairs = [", 'baseline = "prox"\npairs = ['),
    ('["dyn-anchors", "dyn"]', '["dyn-anchors", "dyn-anchors"]'),
    ('["dyn-anchors", "dyn"]', '["dyn-anchors", "scaffold"]'),
    ('["dyn-anchors", "dyn"]]', '["dyn-anchors", "dyn"], ["dyn-anchors", "dyn"]]'),
    ('["dyn-anchors", "dyn"]]', '"dyn-anchors"]'),
])  # fmt: skip
def test_a_bad_pairing_is_refused_in_one_line(tmp_path: Path, change: str, said: str) -> None:
    (tmp_path / "s.toml").write_text(STUDY.replace(change, said))
    with pytest.raises(StudyError) as raised:
        load(tmp_path / "s.toml")
    message = str(raised.value)
    assert "\n" not in message and "families.anchors" in message
    assert any(words in message for words in ("not both", "is not [arm, another arm], given once", "unknown arm 'scaffold'"))
