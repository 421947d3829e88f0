"""The CNN gate again, as pre-registered (studies/alignment_gate/cnn_gate_again.toml and .md, issue 55
item 4): the file loads with the gate's two regimes at its 10 (b) seeds and the gate's flags, plus
every matcher and REPAIR said outright; status lists its 20 cells missing under
studies/alignment_gate/cells/; each cell's flags parse into the settings the pre-registration names;
and the page renders on planted cells with the gate's own readings, pre-registration first."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from fedpfn.analysis.matchers import MATCHERS
from fedpfn.cli.main import main as fedpfn
from fedpfn.cli.study import configure
from fedpfn.core.provenance import collect
from fedpfn.study.cells import config_of, main_cells
from fedpfn.study.spec import Spec, load
from tests.support.gate_cells import MOVING, planted

ROOT = Path(__file__).parents[2]
STUDY = "studies/alignment_gate/cnn_gate_again.toml"
TEMPLATE = "studies/alignment_gate/cnn_gate_again.md"
GATE = "studies/alignment_gate/alignment_gate.toml"
REGIMES = ("cnn-same-init", "cnn-same-init-lr0.06")
EXPLICIT = ("--matchers", "full,masked,changes,activation", "--bn-batches", "20", "--bn-batch-size", "256")


@pytest.fixture
def spec(tmp_path: Path, monkeypatch) -> Spec:
    """The study file and its template in a folder of their own: cells and pages go to tmp_path."""
    monkeypatch.chdir(tmp_path)
    for name in (STUDY, TEMPLATE):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / name, tmp_path / name)
    return load(STUDY)


def test_the_file_re_runs_the_gates_regimes_at_its_b_seeds_with_its_flags(spec: Spec) -> None:
    gate = load(ROOT / GATE)
    assert tuple(spec.arms) == REGIMES and spec.seeds == tuple(range(10)) and spec.command == "lmc"
    assert all(spec.arms[name] == gate.arms[name] for name in REGIMES)  # the gate's regimes, unchanged
    assert spec.shared == (*gate.shared, *EXPLICIT)  # the gate's common flags, the defaults said outright
    assert str(spec.runs) == "studies/alignment_gate/cells" and spec.cell == "{arm}/seed{seed}"
    assert spec.page is not None and spec.page.readings == "studies.alignment_gate.readings:READINGS"


def test_status_lists_its_twenty_cells_missing(spec: Spec, capsys) -> None:
    assert fedpfn(["study", "status", STUDY]) == 0
    lines = capsys.readouterr().out.splitlines()
    listed = [line.split() for line in lines[:-1]]
    assert listed == [[f"studies/alignment_gate/cells/{arm}/seed{seed}", "missing"] for arm in REGIMES for seed in range(10)]
    assert lines[-1].startswith("20 cells: 20 missing; 20 cells left")
    assert not Path("studies/alignment_gate/cells").exists()  # status writes nothing


def test_each_cell_runs_every_matcher_repair_and_the_gates_settings(spec: Spec) -> None:
    cells = main_cells(spec)
    assert [(c.arm, c.seed) for c in cells] == [(arm, seed) for arm in REGIMES for seed in range(10)]
    for cell in cells:
        cfg = config_of(spec, cell, configure).settings
        assert cfg.matchers == tuple(MATCHERS) and (cfg.bn_batches, cfg.bn_batch_size) == (20, 256)
        assert (cfg.model, cfg.split, cfg.start, cfg.epochs, cfg.train_subset) == ("cnn", "same-data", "init", 3, 10000)
        assert cfg.lr == (0.1 if cell.arm == "cnn-same-init" else 0.06) and cfg.anchor_ratio == (0.4,)
        assert cfg.seeds == (cell.seed,) and cfg.device == "cpu" and cfg.threads == 1
        assert cell.folder == Path(f"studies/alignment_gate/cells/{cell.arm}/seed{cell.seed}")


def test_the_page_renders_on_planted_cells_pre_registration_first(spec: Spec, capsys) -> None:
    """Both regimes at 10 seeds on one machine: every field filled, (a) and (b) read, the step check paired."""
    here = collect()
    cells = {name: {**planted(MOVING), "provenance": {f"seed{s}": here for s in range(10)}} for name in REGIMES}
    Path("docs/alignment").mkdir(parents=True)
    Path("docs/alignment/cnn_gate_again.json").write_text(json.dumps(cells))
    assert fedpfn(["study", "page", "--stored", STUDY, "--trust-code"]) == 0
    assert capsys.readouterr().out == "wrote docs/alignment_again.md\n"
    page = Path("docs/alignment_again.md").read_text()
    assert "{" not in page.replace("`{arm}", "")  # every field filled
    assert page.index("## Pre-registration") < page.index("## (a)") < page.index("## (b)")
    assert "Written on 2026-12-08 at 00:03 UTC (`date -u`), before any cell of this study ran" in page
    assert "Every cell ran on one machine with one set of libraries." in page
    assert "Under `full` matching, with a positive control that moved, in 2 of the 2 regimes run" in page
    assert "**cnn-same-init**: one Holm family of the" in page and "**cnn-same-init-lr0.06**: one Holm family" in page
    assert "Paired within one machine: 10 of the 10 seeds both regimes ran." in page
    assert "| cnn-same-init | 10 (0-9) | `--model cnn --split same-data --start init --lr 0.1" in page
