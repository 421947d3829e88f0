"""The small files of a study's finished cells, to commit, so that a study longer than one working
session goes on in the next from a fresh clone.

A study's runs folder under studies/<name>/cells/ is ignored by git except for each cell's
settings, metrics and summary, or an lmc cell's lmc.json (.gitignore): what `fedpfn study run` needs
to reuse a finished cell (its settings compared first, as for any reuse) and what its page reads. A
cell still running or stopped is never listed: without its checkpoint it could not be resumed, so
it starts again (an lmc cell is finished once its lmc.json is written: fedpfn.study.lmc_cells).

    git add $(.venv/bin/python scripts/finished_cells.py studies/cnn_federation/cnn_federation.toml)
    git add $(.venv/bin/python scripts/finished_cells.py studies/alignment_gate/cnn_gate_again.toml)
"""

from __future__ import annotations

import sys
from pathlib import Path

from fedpfn.core.files import CONFIG, METRICS, SUMMARY, is_finished
from fedpfn.study.cells import main_cells, tuning_cells
from fedpfn.study.runner import TIMES
from fedpfn.study.spec import StudyError, load

LMC = "lmc.json"  # an lmc cell's result (fedpfn.study.lmc_cells.RESULT, named here so no torch is imported)
KEPT = (CONFIG, METRICS, SUMMARY, LMC)  # what a reuse and a page read; checkpoints, models and figures stay local


def finished(folder: Path) -> bool:
    """A run that wrote its summary, or an lmc cell that wrote its lmc.json (written only at its end)."""
    return is_finished(folder) or (folder / LMC).is_file()


def finished_files(study: str) -> list[Path]:
    """Each finished cell's kept files (the study's and its parts'), then each runs folder's CPU log."""
    spec = load(study)
    files: list[Path] = []
    for part in spec.every():
        for cell in [*tuning_cells(part), *main_cells(part)]:
            if finished(cell.folder):
                files += [cell.folder / name for name in KEPT if (cell.folder / name).is_file()]
        files += [part.runs / TIMES] if (part.runs / TIMES).is_file() else []
    return list(dict.fromkeys(files))


def main(argv: list[str]) -> int:
    if len(argv) < 1:
        print("usage: finished_cells.py STUDY.toml [STUDY.toml ...]", file=sys.stderr)
        return 2
    try:
        found = [path for study in argv for path in finished_files(study)]
    except StudyError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print("\n".join(map(str, found)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
