"""Where `fedpfn report` writes: into the run's own folder for one run (a run's closing line
suggests `fedpfn report RUN`), above the runs for several; the run stays one fedpfn may continue."""

from __future__ import annotations

from pathlib import Path

from tests.support.folders import run_report, write_run


def test_a_report_of_one_run_is_written_into_it_and_the_run_can_still_be_continued(tmp_path: Path, capsys) -> None:
    """`fedpfn report RUN`, as a run's closing line suggests it, wrote into RUN's parent (issue 56)."""
    from fedpfn.runtime.runfolder import RunFolder

    run = write_run(tmp_path / "runs" / "pfn", [0.5, 0.6])
    code, out, _ = run_report(capsys, run)
    assert code == 0 and f"written: {run / 'report.md'}" in out
    assert {"report.md", "report.csv", "report.json", "report.png"} <= {p.name for p in run.iterdir()}
    assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == ["pfn"]
    folder = RunFolder(run)
    assert folder.foreign_files() == []  # `fedpfn resume RUN --rounds N` accepts the folder
    folder.remove_own_files()  # what --overwrite removes: the report too, as it was of the run replaced
    assert not any(run.iterdir())


def test_a_report_of_several_runs_is_written_in_the_folder_above_them(tmp_path: Path, capsys) -> None:
    runs = [write_run(tmp_path / "cmp" / f"fedavg-s{seed}", [0.5, 0.6], seed=seed) for seed in (0, 1)]
    code, out, _ = run_report(capsys, *runs)
    assert code == 0 and f"written: {tmp_path / 'cmp' / 'report.md'}" in out
