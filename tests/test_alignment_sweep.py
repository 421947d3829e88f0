"""The gate's sweep reuses a finished cell only when its lmc.json holds the cell's settings; a cell
written before the anchors' scope settings existed counts as the default scope."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from scripts import alignment_sweep as sweep

SCOPE = ("anchor_classifier", "anchor_bias", "anchor_norm")


def plant(folder: Path, config: dict) -> Path:
    folder.mkdir(parents=True)
    (folder / "lmc.json").write_text(json.dumps({"config": config}))
    return folder


def test_a_cell_from_before_the_scope_settings_is_finished_and_one_of_other_settings_is_refused(tmp_path: Path) -> None:
    wanted = sweep.expected_config("mlp-same-init", 0)
    assert set(SCOPE) <= set(wanted)
    older = plant(tmp_path / "older", {k: v for k, v in wanted.items() if k not in SCOPE})
    assert sweep.finished(older, "mlp-same-init", 0)
    assert not sweep.finished(tmp_path / "none", "mlp-same-init", 0)
    narrower = plant(tmp_path / "narrower", {**wanted, "anchor_bias": False})
    with pytest.raises(SystemExit, match=r"holds other settings \(anchor_bias\)"):
        sweep.finished(narrower, "mlp-same-init", 0)
    other = plant(tmp_path / "other", {**wanted, "lr": 0.5})
    with pytest.raises(SystemExit, match=r"holds other settings \(lr\)"):
        sweep.finished(other, "mlp-same-init", 0)
