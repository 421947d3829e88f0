"""The CNN federation pilot's rule (studies/cnn_federation/readings.py, written in pilot.md before its
runs): R moves with where a planted curve stops rising, reads 50 on a flat one, says "still rising"
on one that never stops, takes the larger R over skews, and the page's stored file is written from
finished run folders only, refusing a run that did not evaluate every round."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fedpfn.study.runner import TIMES
from fedpfn.study.spec import Spec, StudyError
from studies.cnn_federation import readings as pilot
from tests.support.studies import copied_study

STUDY = "studies/cnn_federation/pilot.toml"


def plateau_at(knee: int, rounds: int = 300, top: float = 0.8) -> list[float]:
    """A curve rising linearly to `top` at round `knee`, flat after."""
    return [top * min(r, knee) / knee for r in range(1, rounds + 1)]


def test_r_moves_with_where_the_curve_stops_rising() -> None:
    # m(130) is the mean of rounds 121-130, all at the top; m(120) is 0.77, more than a point below
    assert pilot.rounds_needed(plateau_at(120))["R"] == 130
    assert pilot.rounds_needed(plateau_at(200))["R"] == 210
    assert pilot.rounds_needed([0.8] * 300) == {"end": pytest.approx(0.8), "R": 50, "rising": False, "last": 300}


def test_a_curve_that_never_stops_rising_is_said_so() -> None:
    found = pilot.rounds_needed(plateau_at(400))
    assert found["rising"] and found["last"] == 300
    stored = {"cells": {"0.1": {"accuracy": plateau_at(400), "cpu_s": 600.0},
                        "0.5": {"accuracy": plateau_at(100), "cpu_s": 300.0}}}  # fmt: skip
    assert pilot.decision(stored) == (300, False, 1.5)


def test_r_is_the_larger_over_skews_and_the_cost_counts_its_runs() -> None:
    stored = {"cells": {"0.1": {"accuracy": plateau_at(150), "cpu_s": 900.0},
                        "0.5": {"accuracy": plateau_at(90), "cpu_s": 300.0}}}  # fmt: skip
    assert pilot.decision(stored) == (160, True, 2.0)
    assert pilot.cost_hours(160, 2.0) == pytest.approx((80 + 16) * 160 * 2.0 / 3600)


@pytest.fixture
def spec(tmp_path: Path, monkeypatch) -> Spec:
    """The pilot's study file in a folder of its own: its runs and stored file go to tmp_path."""
    return copied_study(tmp_path, monkeypatch, STUDY)


def plant(spec: Spec, alpha: str, accuracy: list[float], every: int = 1, cpu_s: float = 450.0) -> None:
    """A finished cell's run folder: metrics every `every` rounds, a config with provenance, a summary."""
    folder = spec.runs / f"a{alpha}/fedavg/s99"
    folder.mkdir(parents=True)
    lines = [{"round": r, "test_accuracy": a} for r, a in enumerate(accuracy, 1) if r % every == 0]
    (folder / "metrics.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    (folder / "config.json").write_text(json.dumps({"provenance": {"device": {"cpu": "a CPU", "cpus": 2}}}))
    (folder / "summary.json").write_text("{}")
    with (spec.runs / TIMES).open("a") as times:
        times.write(json.dumps({"cell": f"a{alpha}/fedavg/s99", "cpu_s": cpu_s, "wall_s": cpu_s / 2}) + "\n")


def test_the_stored_file_holds_finished_cells_and_the_page_reads_it(spec: Spec) -> None:
    plant(spec, "0.1", plateau_at(150))
    (spec.runs / "a0.5/fedavg/s99").mkdir(parents=True)  # begun, not finished: not read
    pilot.keep(spec)
    stored = json.loads(spec.page.stored.read_text())
    assert list(stored["cells"]) == ["0.1"] and stored["cells"]["0.1"]["cpu_s"] == 450.0
    text = "\n".join(pilot.section(spec))
    assert "| 0.1 | 300 |" in text and "| 160 | no | 1.50 | a CPU, 2 cores |" in text
    assert "**R = 160**" in text and "about **6.4 CPU-hours**" in text


def test_a_run_not_evaluated_every_round_is_refused(spec: Spec) -> None:
    plant(spec, "0.1", plateau_at(150), every=5)
    with pytest.raises(StudyError, match="every round"):
        pilot.keep(spec)
    assert not spec.page.stored.exists()
