"""A timm model too large for this machine's memory is one line before anything is allocated
(issue 58): its parameters are counted on the meta device and its float32 weights set against the
memory available; it gave a traceback from the allocator, or took the machine's memory first."""

from __future__ import annotations

from pathlib import Path

import fedpfn.core.models as models
from tests.support.commands import refused

TINY = ["--num-clients", "2", "--clients-per-round", "2", "--rounds", "1", "--partition", "iid"]


def test_a_timm_model_past_the_memory_available_is_one_line(tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.setattr(models, "free_memory", lambda device: (6 * 10**7, "available on this machine"))
    out = tmp_path / "run"
    lines = refused(capsys, monkeypatch, "--model", "timm:vit_small_patch16_224", *TINY, "--out", str(out))
    assert len(lines) == 1, lines
    assert lines[0].startswith("error: model: timm:vit_small_patch16_224 has 21,")
    assert lines[0].endswith("GB as float32, more than the 0.1 GB available on this machine; choose a smaller model")
    assert not out.exists()


def test_a_timm_model_that_fits_is_built(monkeypatch) -> None:
    monkeypatch.setattr(models, "free_memory", lambda device: (10**9, "available on this machine"))
    model = models.build_model("timm:vit_small_patch16_224", (1, 28, 28), 10)
    assert sum(p.numel() for p in model.parameters()) * 4 < 10**9
