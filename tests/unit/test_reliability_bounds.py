"""Issue 42's "Bounds" class and issue 45's 64 models of width 16,384: what a command would hold in
memory and compute is checked against the machine before anything is allocated or trained, and
refused in one line with the estimate and the limit. In-process, with the work each command
would start replaced by a failure: a check that came too late fails fast instead of training.
"""

from __future__ import annotations

import dataclasses
import time

import pytest

from fedpfn.experiments import bounds
from fedpfn.experiments.lmc import LmcConfig
from tests.support.commands import call

MAXIMA = [  # every bound of fedpfn align at its maximum
    "--model", "mlp", "--width", "16384", "--models", "64", "--epochs", "1000", "--batch-size", "65536",
    "--points", "101", "--start", "trained:1000", "--bn-batches", "1000", "--bn-batch-size", "16384",
    "--threads", "1024", "--seeds", "0,1,2,3,4,5,6,7,8,9",
]  # fmt: skip


def started(*_: object, **__: object) -> None:
    raise AssertionError("work started before the bounds were checked")


@pytest.fixture
def guarded(monkeypatch):
    for target in ("fedpfn.experiments.lmc.prepare", "fedpfn.experiments.soup.prepare"):
        monkeypatch.setattr(target, started)


@pytest.mark.parametrize(
    "argv, says",
    [
        (MAXIMA, "would hold about 898.5 GB at once, more than the "),
        (MAXIMA, "and compute about 8.1e+19 floating-point operations, more than the 1e+18 an analysis may"),
        (["--width", "16384", "--models", "64"], "would hold about 378.3 GB at once, more than the"),
    ],
)
def test_align_beyond_the_machine_is_refused_in_one_line_before_anything_is_allocated(
    argv, says, tmp_path, capsys, guarded
):
    started_at = time.monotonic()
    code, lines = call(capsys, "align", *argv, "--out", str(tmp_path / "out"))
    assert code == 2 and len(lines) == 1, lines
    assert lines[0].startswith("error: models: 64 models of 281,477,130 parameters would ") and says in lines[0]
    assert time.monotonic() - started_at < 10 and not (tmp_path / "out").exists()


def test_the_estimate_names_the_memory_it_compares_with(monkeypatch):
    monkeypatch.setattr(bounds, "free_memory", lambda device: (2 * 10**9, "available on this machine"))
    cfg = dataclasses.replace(LmcConfig(), width=4096, models=16)  # 7.9 GB by the estimate
    assert bounds.lmc_problems(cfg) == [
        "models: 16 models of 20,037,642 parameters would hold about 7.9 GB at once, more than the 2.0 GB "
        "available on this machine; use fewer --models, --seeds, --epochs or --points, or a smaller --width"
    ]


@pytest.mark.parametrize(
    "changes",
    [{}, {"models": 64}, {"width": 4096}, {"model": "vgg11", "dataset": "cifar10"}, {"model": "resnet20", "models": 8}],
)
def test_what_the_guides_run_is_not_refused(changes, monkeypatch):
    monkeypatch.setattr(bounds, "free_memory", lambda device: (16 * 10**9, "available on this machine"))
    assert bounds.lmc_problems(dataclasses.replace(LmcConfig(), **changes)) == []


@pytest.mark.parametrize("points", ["9223372036854775807", "103"])
def test_soup_points_are_bounded_before_any_training(points, tmp_path, capsys, guarded):
    started_at = time.monotonic()
    code, lines = call(capsys, "soup", "--points", points, "--out", str(tmp_path / "out"))
    assert code == 2 and f"error: points: {points} must be in [3, 101]" in lines, lines
    assert time.monotonic() - started_at < 10 and not (tmp_path / "out").exists()
