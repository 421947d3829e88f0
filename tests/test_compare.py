"""The comparison command: same partitions and seeds, a table, a plot, restartable."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from conftest import tiny_config
from fedpfn.compare import compare, comparison_configs
from fedpfn.config import ConfigError, RunConfig, read_toml

CONFIGS = Path(__file__).resolve().parents[1] / "configs"


def test_compare_writes_table_and_plot_and_reuses_finished_runs(tmp_path, capsys):
    base = tiny_config(rounds=2, out=str(tmp_path / "cmp"))
    table = compare(base, ["fedavg", "fedpfn"], [0], command="pytest")
    root = tmp_path / "cmp"
    for name in ("comparison.csv", "comparison.md", "comparison.png", "fedavg-s0", "fedpfn-s0"):
        assert (root / name).exists(), name
    with open(root / "comparison.csv") as fh:
        assert [row["algorithm"] for row in csv.DictReader(fh)] == ["fedavg", "fedpfn"]
    md = (root / "comparison.md").read_text()
    assert "| fedpfn |" in md and "Command: `pytest`" in md
    assert all(0 <= row["last5_acc_mean"] <= 1 for row in table)
    same = [(root / f"{a}-s0" / "partition.json").read_text() for a in ("fedavg", "fedpfn")]
    assert same[0] == same[1]
    capsys.readouterr()
    compare(base, ["fedavg", "fedpfn"], [0], command="pytest")
    assert capsys.readouterr().out.count("finished earlier, reused") == 2


def test_compare_refuses_every_bad_algorithm_before_running(tmp_path):
    base = tiny_config(out=str(tmp_path / "cmp"))
    with pytest.raises(ConfigError, match="algorithm: unknown 'fedbar'"):
        comparison_configs(base, ["fedavg", "fedbar"], [0, 1])
    assert not (tmp_path / "cmp").exists()


@pytest.mark.parametrize("preset", sorted(p.name for p in CONFIGS.glob("*.toml")))
def test_presets_are_valid(preset):
    values = read_toml(CONFIGS / preset)
    cfg = RunConfig.from_dict(values)
    assert cfg.problems() == []


def test_paper_preset_decays_lr_each_round():
    cfg = RunConfig.from_dict(read_toml(CONFIGS / "cifar10_paper.toml"))
    assert cfg.lr_at(1) == 0.1 and abs(cfg.lr_at(101) - 0.1 * 0.99**100) < 1e-12


def test_flower_app_config_declares_every_setting():
    """The SuperLink refuses --run-config keys the app does not declare."""
    import dataclasses
    import tomllib

    pyproject = tomllib.loads((CONFIGS.parent / "pyproject.toml").read_text())
    declared = pyproject["tool"]["flwr"]["app"]["config"]
    assert {k.replace("-", "_") for k in declared} == {f.name for f in dataclasses.fields(RunConfig)}
    assert RunConfig.from_dict(declared).problems() == []
