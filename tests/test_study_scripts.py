"""The study scripts' command lines: `--help` is help, a bad argument is one line and exit 2,
before any run folder is read (scripts/study_report.py, scripts/study.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).parents[1] / "scripts"
HINT = " (--help lists what is accepted)\n"


def script(name: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPTS / name), *args], capture_output=True, text=True, timeout=60)


def test_study_report_help_is_help_not_a_folder() -> None:
    done = script("study_report.py", "--help")
    assert done.returncode == 0 and done.stdout.startswith("usage: study_report.py [-h] [RUNS]") and not done.stderr


@pytest.mark.parametrize(
    ("name", "args", "says"),
    [
        ("study_report.py", ["no/such/folder"], "RUNS 'no/such/folder' is not a folder; give the folder of "
                                                  "scripts/study.py's runs"),  # fmt: skip
        ("study_report.py", ["--bogus"], "unknown flag --bogus"),
        ("study.py", ["zzz"], "argument phase: invalid choice: 'zzz' (choose from 'grid', 'main', 'schedule', "
                              "'servers', 'ratios', 'anchors', 'report', 'all')"),  # fmt: skip
    ],
)
def test_a_bad_argument_is_one_line_and_exit_2(name: str, args: list[str], says: str) -> None:
    done = script(name, *args)
    assert (done.returncode, done.stdout, done.stderr) == (2, "", f"{name}: {says}{HINT}")
