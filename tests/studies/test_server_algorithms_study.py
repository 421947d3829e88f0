"""The server-algorithm study as pre-registered (studies/server_algorithms/, issue 55 item 3): the file
loads with the seeds, arms and endpoint its .md names, status lists its 15 arms × 8 seeds as missing,
every cell's flags make the run config the .md says (step, coefficients, masks, server), and each
family pairs X+anchors with its own X or X+control, on planted results and on the page's markers."""

from __future__ import annotations

from pathlib import Path

import pytest

from fedpfn.cli.main import main as fedpfn
from fedpfn.cli.study import configure
from fedpfn.study import page
from fedpfn.study.cells import config_of, main_cells
from fedpfn.study.spec import Spec
from tests.support.studies import copied_study

STUDY = "studies/server_algorithms/server_algorithms.toml"
TEMPLATE = "studies/server_algorithms/server_algorithms.md"
CLIENT = {"fedprox": "fedprox", "scaffold": "scaffold", "feddyn": "feddyn"}  # X: its client rule
SERVER = {"fedavgm": 0.3, "fedadam": 0.03}  # X: its server rate (the earlier study's server grid)
XS = [*CLIENT, *SERVER]
SEEDS = tuple(range(20, 28))


@pytest.fixture
def spec(tmp_path: Path, monkeypatch) -> Spec:
    """The study file and its template in a folder of their own: runs and pages go to tmp_path."""
    return copied_study(tmp_path, monkeypatch, STUDY, TEMPLATE)


def test_the_file_declares_what_the_pre_registration_says(spec: Spec) -> None:
    assert spec.seeds == SEEDS and spec.axes == {}
    assert list(spec.arms) == [f"{x}{role}" for x in XS for role in ("", "-anchors", "-control")]
    acc = spec.endpoints["acc"]
    assert (acc.metric, acc.last, acc.statistic, acc.unit) == ("test_accuracy", 10, "mean", "points")
    assert spec.page is not None and str(spec.page.out) == "docs/server_algorithms.md"
    assert str(spec.page.stored) == "docs/study/server-algorithms.json" and spec.page.readings is None


def test_status_lists_every_cell_missing(spec: Spec, capsys) -> None:
    assert fedpfn(["study", "status", STUDY]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[-1].startswith("120 cells: 120 missing; 12000 rounds left")
    assert sum(line.endswith("missing") for line in lines) == 15 * 8


def test_each_cell_runs_the_settings_the_pre_registration_names(spec: Spec) -> None:
    cells = main_cells(spec)
    assert sorted((c.arm, c.seed) for c in cells) == sorted((a, s) for a in spec.arms for s in SEEDS)
    for cell in cells:
        cfg = config_of(spec, cell, configure)
        x, _, role = cell.arm.partition("-")
        rule = CLIENT.get(x, "fedavg")
        anchored = f"fedpfn+{rule}" if x in CLIENT else "fedpfn"
        assert cfg.algorithm == (anchored if role else rule) and cfg.seed == cell.seed
        assert cfg.server == (x if x in SERVER else "fedavg")
        local, federation = cfg.local, cfg.federation
        assert (local.lr, local.lr_decay, local.local_epochs, local.batch_size) == (0.01, 0.99, 5, 50)
        assert (federation.num_clients, federation.clients_per_round, federation.rounds) == (100, 10, 100)
        assert (cfg.task.dataset, cfg.task.model, cfg.partition.alpha) == ("fmnist", "mlp", 0.1)
        hp = cfg.hparams
        assert hp.get("fedpfn.anchor_masks") == {"": None, "anchors": "shared", "control": "client"}[role]
        assert hp.get("fedpfn.anchor_ratio") == (0.4 if role else None)
        assert hp.get("fedprox.prox_mu") == (0.01 if x == "fedprox" else None)
        assert hp.get("feddyn.feddyn_alpha") == (0.01 if x == "feddyn" else None)
        assert hp.get(f"{x}.server_lr") == SERVER.get(x)
        assert hp.get(f"{x}.server_momentum") == (0.9 if x in SERVER else None)


def planted(spec: Spec) -> dict:
    """Stored results whose accuracy tells each arm apart: X at 0.70 + 0.01 a place in XS, anchors
    0.002 above it, the control 0.001 above it, and a seed's own offset shared by all its arms."""
    cells = []
    for arm in spec.arms:
        x, _, role = arm.partition("-")
        acc = 0.70 + 0.01 * XS.index(x) + {"": 0.0, "anchors": 0.002, "control": 0.001}[role]
        cells += [{"arm": arm, "point": {}, "seed": s, "folder": f"runs/{arm}/s{s}", "command": "fedpfn run",
                   "endpoints": {"acc": acc + 0.003 * (s % 3) + 1e-5 * s * (role == "anchors")}}
                  for s in SEEDS]  # fmt: skip
    return {"study": STUDY, "cells": cells, "chosen": None}


def test_each_family_pairs_x_anchors_with_its_own_x_and_control(spec: Spec) -> None:
    assert sorted(spec.families) == ["anchors", "control"]
    stored = planted(spec)
    for question, suffix, gap in (("anchors", "", 0.2), ("control", "-control", 0.1)):
        family = spec.families[question]
        assert family.endpoint == "acc" and family.pairs == tuple((f"{x}-anchors", f"{x}{suffix}") for x in XS)
        rows = page.family_rows(spec, stored, question)
        assert [row.label for row in rows] == [f"{spec.labels[x]}+anchors − {spec.labels[x + suffix]}" for x in XS]
        for row in rows:
            assert 100 * row.mean == pytest.approx(gap + 100 * 1e-5 * 23.5)
        first = min(rows, key=lambda row: row.p_value)  # Holm counts the question's five X: its smallest p times 5
        assert first.p_holm == pytest.approx(min(1.0, 5 * first.p_value))


def test_every_marker_of_the_template_is_one_the_page_writes(spec: Spec) -> None:
    text = page.render(spec, planted(spec))
    assert "<!-- study:" not in text and text.count("| FedAdam+anchors − FedAdam+control |") == 1
    assert "fedpfn study page studies/server_algorithms/server_algorithms.toml" in text
