"""The CNN federation study as pre-registered (studies/cnn_federation/, issue 55 item 2): the file
loads with the seeds, arms, rounds and families its .md names (as amended there); status lists its
grid of 32 and its 64 main runs; the grid's and the main cells' settings are the .md's; the primary family is FedPFN against FedAvg and against the control at both skews (Holm
over 4); and every marker of the template renders on planted results."""

from __future__ import annotations

from pathlib import Path

import pytest

from fedpfn.cli.main import main as fedpfn
from fedpfn.cli.study import configure
from fedpfn.study import page
from fedpfn.study.cells import config_of, main_cells, tuning_cells
from fedpfn.study.spec import Spec
from tests.support.studies import copied_study

STUDY = "studies/cnn_federation/cnn_federation.toml"
TEMPLATE = "studies/cnn_federation/cnn_federation.md"
SEEDS = tuple(range(40, 48))
ARMS = ("fedavg", "fedpfn", "fedpfn-client", "fedpnu-neuron")  # FedPFN at FedAvg's step: dropped (the .md)


@pytest.fixture
def spec(tmp_path: Path, monkeypatch) -> Spec:
    """The study file and its template in a folder of their own: runs and pages go to tmp_path."""
    return copied_study(tmp_path, monkeypatch, STUDY, TEMPLATE)


def test_the_file_declares_what_the_pre_registration_says(spec: Spec) -> None:
    assert spec.seeds == SEEDS and tuple(spec.arms) == ARMS and spec.axes == {"alpha": ("0.1", "0.5")}
    assert spec.tune is not None and spec.tune.borrow == {}
    assert spec.tune.values == ("0.01", "0.02", "0.05", "0.1") and spec.tune.seed == 39 and spec.tune.last == 10
    assert spec.families["primary"].pairs == (("fedpfn", "fedavg"), ("fedpfn", "fedpfn-client"))
    assert spec.families["secondary"].pairs == (("fedpnu-neuron", "fedavg"),)
    assert str(spec.runs) == "studies/cnn_federation/cells"


def test_status_lists_the_grid_then_the_main_runs(spec: Spec, capsys) -> None:
    assert fedpfn(["study", "status", STUDY]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[-1].startswith("96 cells: 32 missing, 64 waiting for the tuning runs; 24000 rounds left")


def test_each_cell_runs_the_settings_the_pre_registration_names(spec: Spec) -> None:
    grid = tuning_cells(spec)
    assert sorted({c.arm for c in grid}) == sorted(ARMS) and len(grid) == 4 * 4 * 2
    for cell in [*grid[:4], *main_cells(spec)]:
        cfg = config_of(spec, cell, configure)
        local, federation = cfg.local, cfg.federation
        assert (cfg.task.dataset, cfg.task.model, cfg.partition.alpha) == ("fmnist", "cnn", float(dict(cell.point)["alpha"]))
        assert (local.local_epochs, local.batch_size, local.lr_decay, local.momentum) == (1, 50, 0.99, 0.9)
        assert (federation.num_clients, federation.clients_per_round) == (100, 10)
        assert federation.rounds == (150 if cell.tuning else 300) and cfg.seed == (39 if cell.tuning else cell.seed)
        assert cfg.algorithm == {"fedavg": "fedavg", "fedpnu-neuron": "fedpnu"}.get(cell.arm, "fedpfn")
        assert cfg.hparams.get("fedpfn.anchor_masks") == {"fedpfn-client": "client", "fedavg": None, "fedpnu-neuron": None}.get(
            cell.arm, "shared")  # fmt: skip
        assert cfg.hparams.get("fedpnu.anchor_granularity") == ("neuron" if cell.arm == "fedpnu-neuron" else None)


def planted(spec: Spec) -> dict:
    """Stored results: each arm a level, a seed's offset shared by its arms, the grid's scores."""
    level = dict(zip(ARMS, (0.80, 0.81, 0.805, 0.79)))
    cells = [{"arm": arm, "point": {"alpha": a}, "seed": s, "folder": f"cells/{arm}/s{s}", "command": "fedpfn run",
              "endpoints": {"acc": level[arm] + 0.001 * (s % 3) + 1e-4 * s * (arm == "fedpfn")}}
             for a in ("0.1", "0.5") for arm in ARMS for s in SEEDS]  # fmt: skip
    chosen = [{"arm": arm, "point": {"alpha": a}, "value": "0.05"} for a in ("0.1", "0.5") for arm in ARMS]
    scores = [{"arm": arm, "point": {"alpha": a}, "value": v, "score": 0.5 + 0.1 * n} for a in ("0.1", "0.5")
              for arm in ARMS for n, v in enumerate(spec.tune.values)]  # fmt: skip
    return {"study": STUDY, "cells": cells, "chosen": chosen, "scores": scores}


def test_the_primary_family_is_holm_over_four_and_every_marker_renders(spec: Spec) -> None:
    rows = page.family_rows(spec, planted(spec), "primary")
    assert [r.label for r in rows] == [f"alpha={a}: FedPFN − {b}" for a in ("0.1", "0.5")
                                       for b in ("FedAvg", "control (client masks)")]  # fmt: skip
    first = min(rows, key=lambda row: row.p_value)
    assert first.p_holm == pytest.approx(min(1.0, 4 * first.p_value))
    text = page.render(spec, planted(spec))
    assert "<!-- study:" not in text
    assert "| FedPNU neuron | alpha=0.1 | 0.5000 | 0.6000 | 0.7000 | 0.8000 | 0.05 |" in text
