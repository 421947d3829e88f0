"""Compare finished runs with their uncertainty: the command.

    python -m fedpfn.analysis.report runs/study-a0.1 [--baseline fedavg] [--last-k 5] [--target 0.8] [--out DIR]

Reads the run folders (fedpfn.analysis.runs), computes per-arm statistics and paired
differences against a baseline (fedpfn.analysis.stats) and writes report.md, report.csv,
report.json and figures (fedpfn.analysis.render).
"""

from __future__ import annotations

import argparse
import math
import os
import shlex
import sys
from pathlib import Path

from fedpfn.analysis.render import markdown, write_report
from fedpfn.analysis.runs import Run, load_runs
from fedpfn.analysis.stats import analyse
from fedpfn.core.flags import OneLineParser
from fedpfn.core.places import out_problem
from fedpfn.core.settings import ConfigError


def positive_int(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"'{text}' is not a whole number of rounds >= 1")
    return int(text)


def accuracy(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"'{text}' is not an accuracy in (0, 1]")
    return value


def build_parser(prog: str = "python -m fedpfn.analysis.report") -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog=prog,
        description="Compare finished run folders: mean and n-1 std over seeds, paired differences "
        "against a baseline with a 95 % Student's t interval.",
    )
    parser.add_argument("runs", nargs="+", metavar="RUN_FOLDERS", help="run folders, or folders holding them")
    parser.add_argument(
        "--baseline", help="arm label to compare against (default: fedavg if present, else the first arm)"
    )
    parser.add_argument(
        "--last-k", type=positive_int, default=5, help="evaluated rounds averaged at the end (default: 5)"
    )
    parser.add_argument(
        "--target", type=accuracy, default=0.8, help="accuracy whose first round is reported (default: 0.8)"
    )
    parser.add_argument(
        "--out", help="folder for report.md/.csv/.json and figures (default: the run's own folder for one run, "
        "else the folder above all runs)",
    )
    return parser


def check_out(out: str | Path | None) -> None:
    """The check every command's --out goes through (fedpfn.core.places), as a ConfigError."""
    if out is not None and (problem := out_problem(Path(out), "a report")) is not None:
        raise ConfigError(problem)


def default_out(runs: list[Run]) -> Path:
    """One run's own folder (a run's closing line suggests `fedpfn report RUN`: its report belongs
    with it, not in a parent shared with other runs), else the folder above all the runs."""
    if len(runs) == 1:
        return runs[0].path
    return Path(os.path.commonpath([run.path.parent for run in runs]))


def main(argv: list[str] | None = None, prog: str = "python -m fedpfn.analysis.report") -> int:
    args = build_parser(prog).parse_args(argv)
    command = "python -m fedpfn.analysis.report " + shlex.join(sys.argv[1:] if argv is None else argv)
    try:
        check_out(args.out)  # before any folder is read, when it is given
        runs = load_runs(args.runs)
        out = Path(args.out) if args.out else default_out(runs)
        check_out(out)
        report = analyse(runs, args.baseline, args.last_k, args.target, command)
        paths = write_report(report, out)
    except (ConfigError, OSError) as err:
        for line in str(err).splitlines():
            print(f"error: {line}", file=sys.stderr)
        return 2
    print(markdown(report))
    print("written: " + ", ".join(map(str, paths)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
