"""What `fedpfn compare` leaves on the terminal (issue 44): one compact table of the arms'
headline figures with intervals, and one `next:` line naming the comparison's own report,
not 40 lines of 10-column Markdown. Built from synthetic run folders: nothing trains."""

from __future__ import annotations

import contextlib
import re
import shlex
from pathlib import Path

from rich.console import Console

from fedpfn.analysis.runs import load_runs
from fedpfn.analysis.stats import analyse
from fedpfn.analysis.terminal import show
from fedpfn.runtime.compare import compare, comparison_configs
from fedpfn.runtime.progress import Progress, as_part_of_a_comparison
from tests.support.config import tiny_config
from tests.support.folders import FEDAVG_FINAL, FEDPFN_FINAL, write_run


def shown(tmp_path: Path, seeds: int, width: int) -> list[str]:
    for seed, (avg, pfn) in enumerate(list(zip(FEDAVG_FINAL, FEDPFN_FINAL))[:seeds]):
        write_run(tmp_path / "cmp" / f"fedavg-s{seed}", [0.5, 0.6, avg], seed=seed)
        write_run(tmp_path / "cmp" / f"fedpfn-s{seed}", [0.5, 0.6, pfn], seed=seed, algorithm="fedpfn",
                  anchor_ratio=0.4)  # fmt: skip
    report = analyse(load_runs([tmp_path / "cmp"]), "fedavg", k=2, target=0.8, command="fedpfn compare")
    console = Console(width=width, record=True, highlight=False, file=open("/dev/null", "w"))  # noqa: SIM115
    show(report, tmp_path / "my cmp" / "comparison.md", console)
    return console.export_text().splitlines()


def test_compare_ends_with_a_compact_table_and_one_next_line(tmp_path: Path) -> None:
    lines = shown(tmp_path, seeds=4, width=100)
    assert len(lines) <= 12 and all(len(line) <= 100 for line in lines[:-1]), lines  # the next: line is whole
    text = "\n".join(lines)
    assert "|---|" not in text  # no raw Markdown
    fedpfn = next(line for line in lines if line.lstrip().startswith("fedpfn"))
    # the last-2 window is (0.6 + final) / 2: its paired differences are half the finals' (+2.00 points)
    assert re.search(r"\+1\.00 \[[-+]\d\.\d\d, \+\d\.\d\d\]", fedpfn) and "not resolved" in fedpfn, fedpfn
    assert "baseline" in next(line for line in lines if line.lstrip().startswith("fedavg"))
    nexts = [line for line in lines if "next:" in line]
    assert len(nexts) == 1 and nexts[0] == lines[-1]
    assert shlex.quote(str(tmp_path / "my cmp" / "comparison.md")) in nexts[0]
    assert "comparison.png" in nexts[0] and "paired_differences.png" in nexts[0]


def test_a_narrow_terminal_wraps_the_table_and_loses_no_column(tmp_path: Path) -> None:
    lines = shown(tmp_path, seeds=1, width=60)
    table = [line for line in lines if "next:" not in line]
    assert all(len(line) <= 60 for line in table), table
    text = "\n".join(table)
    assert "verdict" in text and "final" in text and "interval" in text and "…" not in text, text
    assert "no test: 1" in text and "seed" in text


def test_compare_of_finished_runs_prints_the_table_and_one_next_line(tmp_path: Path, capsys) -> None:
    """Reused sub-runs (nothing trains): the terminal gets the table, never the report's Markdown."""
    base = tiny_config(rounds=3, out=str(tmp_path / "cmp"))
    for cfg in comparison_configs(base, ["fedavg", "fedpfn"], [0, 1, 2]):
        finals = FEDAVG_FINAL if cfg.algorithm == "fedavg" else FEDPFN_FINAL
        write_run(cfg.run_dir, [0.5, 0.6, finals[cfg.seed]], **{**cfg.to_dict(), "rounds": 3})
    compare(base, ["fedavg", "fedpfn"], [0, 1, 2], command="fedpfn compare fedavg,fedpfn")
    out = capsys.readouterr().out
    assert "|---|" not in out and out.count("next:") == 1, out
    assert out.rstrip().splitlines()[-1].startswith(f"  next: every table and verdict in full: {base.run_dir}/comparison.md")
    assert "| fedpfn |" in (base.run_dir / "comparison.md").read_text()  # the file keeps every table


def test_a_sub_run_of_a_comparison_closes_without_a_next_line_of_its_own(tmp_path: Path, capsys) -> None:
    summary = {"rounds": 2, "wall_seconds": 3, "final_test_accuracy": 0.8, "last5_mean_accuracy": 0.8,
               "last5_window": "last 2 of 2 evaluated rounds", "bytes_up_total": 0, "bytes_down_total": 0,
               "num_failures_total": 0}  # fmt: skip
    for part, says in ((False, 1), (True, 0)):
        progress = Progress(2, tmp_path / f"{part}" / "run.log", show=True)
        (tmp_path / f"{part}").mkdir()
        with as_part_of_a_comparison() if part else contextlib.nullcontext():
            progress.close(summary)
        assert capsys.readouterr().out.count("next:") == says
