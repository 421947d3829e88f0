"""scripts/gpu_gate.py, the one command for the gate's GPU regimes: it runs each cell of
studies/alignment_gate/alignment_gate_gpu.toml with the command line the study runner would give it (so the cells it
brings back read as finished), every cell passes the command's own checks before a GPU is spent on it,
and without a CUDA device nothing runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from fedpfn.analysis.matchers import MATCHERS
from fedpfn.study.cells import main_cells
from fedpfn.study.lmc_cells import LmcCells
from fedpfn.study.spec import load
from scripts import gpu_gate


def test_the_script_runs_each_cell_as_the_study_declares_it() -> None:
    spec = load(gpu_gate.STUDY)
    declared = {(c.arm, c.seed): (str(c.folder), LmcCells().argv(list(c.flags), c.seed, c.folder)) for c in main_cells(spec)}
    script = {(arm, seed): (str(folder), argv) for arm, seed, folder, argv in gpu_gate.cells()}
    assert script == declared and len(script) == 10
    assert [seed for _, seed, _, _ in gpu_gate.cells()][:4] == [0, 0, 1, 1]  # seed by seed across the regimes


@pytest.mark.skipif(not gpu_gate.DEBIAN.is_dir(), reason="needs Debian's Fashion-MNIST files for the data check")
def test_every_cell_passes_the_commands_checks_with_every_matcher() -> None:
    for arm, _, _, argv in gpu_gate.cells():
        k = argv.index("--data-root")
        cfg = LmcCells().checked([*argv[: k + 1], str(gpu_gate.DEBIAN), *argv[k + 2 :]])
        assert cfg.model == arm.split("-")[0] and cfg.matchers == MATCHERS and cfg.bn_batches > 0
        assert cfg.arms == ("plain", "shared", "independent", "diff-init") and cfg.device == "auto"


def test_without_a_cuda_device_nothing_runs(tmp_path: Path, monkeypatch, capsys) -> None:
    import subprocess

    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: pytest.fail("a cell was started"))
    monkeypatch.setenv("OUT", str(tmp_path))
    assert gpu_gate.main([]) == 2
    assert capsys.readouterr().err == "error: no CUDA device: these cells are for the GPU machine\n"
    assert not any(tmp_path.iterdir())
