"""`fedpfn seeds-needed`: the seeds a difference needs, from an earlier comparison's spread, by the
test that decides (the paired t test at the level Holm asks of a family's smallest p), with the
exact test's floor beside."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fedpfn.analysis.inference import ALPHA, mde
from fedpfn.analysis.plan import exact_seeds, seeds_needed
from fedpfn.cli.main import main as fedpfn


def test_the_seeds_needed_are_the_fewest_whose_mde_reaches_the_difference() -> None:
    at_ten = mde(10, 1.0)
    assert at_ten is not None
    assert seeds_needed(1.0, at_ten * 1.0001) == 10
    assert seeds_needed(1.0, at_ten * 0.999) == 11
    assert seeds_needed(2.0, 2 * at_ten * 1.0001) == 10  # the std and the difference scale together
    strict = mde(10, 1.0, ALPHA / 4)  # a family of 4: Holm's first level asks more seeds
    assert strict is not None and strict > at_ten and seeds_needed(1.0, strict * 1.0001, ALPHA / 4) == 10
    assert seeds_needed(1.0, 1e-6) is None  # out of reach, said so rather than looped over


@pytest.mark.parametrize(("alpha", "seeds"), [(0.05, 6), (0.0625, 6), (0.01, 8), (0.005, 9)])
def test_the_exact_test_needs_2_over_2_to_the_n_below_the_level(alpha: float, seeds: int) -> None:
    assert exact_seeds(alpha) == seeds
    assert 2 / 2**seeds < alpha <= 2 / 2 ** (seeds - 1)


def test_a_comparison_folder_is_planned_from_its_spread(tmp_path: Path, capsys) -> None:
    diffs = [0.01, 0.03, 0.02, 0.00, 0.04]  # accuracy fractions: std 1.58 points
    stored = {"label": "fedpfn", "metric": "lastk", "seeds": list(range(5)), "diffs": diffs}
    (tmp_path / "comparison.json").write_text(json.dumps({"paired": [stored, {**stored, "metric": "final"}]}))
    assert fedpfn(["seeds-needed", str(tmp_path), "--difference", "2"]) == 0
    out = capsys.readouterr().out
    std = 100 * float(__import__("numpy").std(diffs, ddof=1))
    needed = seeds_needed(std, 2.0)
    assert f"- fedpfn (lastk): the std of its differences was {std:.2f} points over 5 seeds; 2.00 points needs {needed} seeds" in out
    assert "at the level Holm asks of a family's smallest p: p < 0.05." in out and "(final)" not in out
    assert out.rstrip().endswith("it needs 6 seeds for 0.05.")


def test_a_bad_request_is_one_line_and_exit_2(tmp_path: Path, capsys) -> None:
    (tmp_path / "comparison.json").write_text(json.dumps({"paired": []}))
    assert fedpfn(["seeds-needed", str(tmp_path), "--difference", "0"]) == 2
    assert capsys.readouterr().err == "error: difference: 0 is not above 0\n"
    assert fedpfn(["seeds-needed", str(tmp_path), "--difference", "1"]) == 2
    assert capsys.readouterr().err == f"error: {tmp_path / 'comparison.json'}: no comparison of metric 'lastk' to plan from\n"
    missing = tmp_path / "no-such-run"
    assert fedpfn(["seeds-needed", str(missing), "--difference", "1"]) == 2
    assert capsys.readouterr().err == (
        f"error: {missing}: no such file or folder; give a comparison folder, its comparison.json "
        "or report.json, or a study's TOML\n"
    )


def test_a_study_is_planned_family_by_family_from_its_stored_results(monkeypatch, capsys) -> None:
    """studies/attacks/attacks.toml's two declared families of 10, from docs/study/attacks.json; a study whose page
    keeps its own format (the drift study's) is refused in one line."""
    monkeypatch.chdir(Path(__file__).parents[2])
    assert fedpfn(["seeds-needed", "studies/attacks/attacks.toml", "--difference", "5"]) == 0
    out = capsys.readouterr().out
    assert "p < 0.005 (a family of 10)" in out and out.count("\n- ") == 20
    assert "- algorithm=fedavg: Krum (30 %) − FedAvg mean (30 %) (final): the std of its differences was 8.83 points" in out
    assert fedpfn(["seeds-needed", "studies/drift/drift.toml", "--difference", "1"]) == 2
    assert "only a study with stored results in its page's own format" in capsys.readouterr().err
