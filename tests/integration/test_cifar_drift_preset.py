"""configs/cifar10_drift.toml runs as written on CIFAR's own file layout (a simulation: moved out of
tests/unit/test_data.py, whose loaders it relies on)."""

from __future__ import annotations

import json
from pathlib import Path

from tests.support.cifar import write_cifar


def test_the_cifar10_drift_preset_runs_on_a_folder_in_cifars_format(tmp_path: Path) -> None:
    """configs/cifar10_drift.toml as written (its design: 5 local epochs, alignment every 10 rounds),
    on a small CIFAR-10 folder in the official files' layout, shrunk to 4 clients and 10 rounds."""
    from fedpfn.core.settings import read_toml
    from fedpfn.runtime.algorithms import load_config
    from fedpfn.runtime.simulation import simulate

    write_cifar(tmp_path / "data", "cifar10", per_batch=40, seed=5)
    preset = read_toml(Path(__file__).resolve().parents[2] / "configs" / "cifar10_drift.toml")
    assert preset["local_epochs"] == 5 and preset["alignment_every"] == 10 and preset["num_clients"] == 100
    cfg = load_config({**preset, "data_root": str(tmp_path / "data"), "num_clients": 4, "clients_per_round": 2,
                       "rounds": 10, "alpha": 1.0, "alignment_samples": 20, "out": str(tmp_path / "run")})
    simulate(cfg, show_progress=False)
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == 10 and rows[-1]["align_clients"] == 2 and 0 <= rows[-1]["test_accuracy"] <= 1
