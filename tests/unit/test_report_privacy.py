"""`fedpfn report` names the privacy budget a noised run spent (issue 43 item 3: the report names
it as the header does): ε by its last round, mean over seeds, beside the noise; none without."""

from __future__ import annotations

import json
from pathlib import Path


from fedpfn.analysis.report import main as report_main
from tests.support.folders import write_run


def with_budget(folder: Path, epsilons: list[float | str]) -> None:
    """Each round's row given the budget the accountant reported after it."""
    rows = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]
    for row, epsilon in zip(rows, epsilons):
        row.update(dp_epsilon=epsilon, dp_delta=1e-5, dp_noise_multiplier=0.5)
    (folder / "metrics.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))


def test_the_report_shows_the_budget_spent_by_the_last_round(tmp_path, capsys):
    for seed, last in ((0, 3.0), (1, 5.0)):
        with_budget(write_run(tmp_path / f"dp-s{seed}", [0.5, 0.6], seed=seed, algorithm="dp"), [1.0, last])
    for seed in (0, 1):
        write_run(tmp_path / f"plain-s{seed}", [0.6, 0.7], seed=seed)
    assert report_main([str(tmp_path / f"{a}-s{s}") for a in ("plain", "dp") for s in (0, 1)]) == 0
    text = (tmp_path / "report.md").read_text()
    assert "## Privacy budget spent" in text
    row = next(line for line in text.splitlines() if line.startswith("| dp |") and "± " in line and "| 0.5 |" in line)
    assert "| 4 ± 1.4 | 1e-05 |" in row, row  # ε: mean 4 of 3 and 5, std 1.41, as of round 2
    assert not any(line.startswith("| plain |") and "1e-05" in line for line in text.splitlines())


def test_a_report_of_runs_without_noise_has_no_budget_table(tmp_path):
    write_run(tmp_path / "r-s0", [0.5, 0.6])
    assert report_main([str(tmp_path / "r-s0")]) == 0
    assert "Privacy budget" not in (tmp_path / "r-s0" / "report.md").read_text()  # one run's report: in its folder


def test_a_budget_that_is_no_number_is_refused_in_one_line(tmp_path, capsys):
    run = write_run(tmp_path / "r-s0", [0.5, 0.6])
    with_budget(run, [1.0, "lots"])
    assert report_main([str(run)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["error: runs: round 2's dp_epsilon is 'lots', not a finite number >= 0 or null"]
