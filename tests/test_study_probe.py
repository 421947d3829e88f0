"""Issue 58's probe of `fedpfn study`, kept: a study file is someone else's file too.

Grouped by surface, each case as a careful user or an attacker would try it, checked for what a
user relies on: exit 2 with one `error:` line naming the key or file, no traceback, quickly;
the marker of planted code never written; nothing outside the study's folder changed. A new
surface of a study file gets its cases here, in its group.

- code: the code a study file names (a rule, server, wrapper, mod, model, dataset; in an arm,
  the shared flags, an axis, a tuned value, a part): `status` and `page` never import it, `run`
  only with `--trust-code`;
- children: the processes `--jobs N` starts see nothing of the current folder first;
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from fedpfn.cli.main import main as fedpfn

SHARED = "--dataset fmnist --model mlp --num-clients 100 --clients-per-round 2 --rounds 1 --partition iid"
PLANTED = (  # every kind of code a setting may name, each writing the marker as its module is imported
    "import pathlib\npathlib.Path(__file__).with_name('ran').write_text('ran')\n"
    "from clients.base import ClientRule\n"
    "class Rule(ClientRule):\n    name = 'evil'\n"
    "def build(*a, **k):\n    raise SystemExit('built')\n"
)


def study(capsys, *argv: str) -> tuple[int, list[str], str]:
    """The command in this process: its exit code, its error lines, its output; timed to 15 s."""
    started = time.monotonic()
    code = fedpfn(["study", *argv])
    out, err = capsys.readouterr()
    assert time.monotonic() - started < 15, f"fedpfn study {' '.join(argv)} took more than 15 s"
    return code, err.splitlines(), out


def refused_in_one_line(capsys, *argv: str) -> str:
    """The command's one error line (exit 2, nothing on stdout, no traceback)."""
    code, lines, out = study(capsys, *argv)
    assert code == 2 and len(lines) == 1 and lines[0].startswith("error: study: "), (code, lines)
    assert out == "" and "Traceback" not in lines[0]
    return lines[0]


@pytest.fixture
def here(tmp_path: Path, monkeypatch) -> Path:
    """The folder the study runs in, holding a planted module `evilcode` (a user's code, or an attacker's)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("fedpfn.core.user_code._NAMED_BY_COMMAND", set())  # a fresh process has named nothing
    monkeypatch.delitem(sys.modules, "evilcode", raising=False)
    (tmp_path / "evilcode.py").write_text(PLANTED)
    return tmp_path


@pytest.fixture(autouse=True)
def registry_as_it_was():
    """A rule imported by one test stays registered in its process: not for the next test."""
    from clients import CLIENT_RULES

    before = dict(CLIENT_RULES)
    yield
    CLIENT_RULES.clear()
    CLIENT_RULES.update(before)


def write(folder: Path, text: str, name: str = "s.toml") -> str:
    (folder / name).write_text(f'runs = "runs/s"\nshared = "{SHARED}"\n{text}')
    return name


# --- code: what a study file names is imported only where the user typed --trust-code -----------

NAMING = {  # where in a study file code is named -> the file's text
    "an arm's rule": "[arms]\na = '--algorithm fedavg'\nb = '--algorithm evilcode:Rule'\n",
    "an anchored rule": "[arms]\na = '--algorithm fedpfn+evilcode:Rule'\n",
    "a server": "[arms]\na = '--server evilcode:Rule'\n",
    "a server wrapper": "[arms]\na = ['--server-wrap', 'evilcode:Rule']\n",
    "a client mod": "[arms]\na = '--client-mod evilcode:build'\n",
    "a model": "[arms]\na = '--model evilcode:build'\n",
    "a dataset": "[arms]\na = 'dataset=evilcode:build'\n",
    "an axis value": "[arms]\na = ''\n[axes]\nalgorithm = ['fedavg', 'evilcode:Rule']\n",
    "a named axis value": "[arms]\na = ''\n[axes.kind]\nplain = '--lr 0.1'\nevil = '--algorithm evilcode:Rule'\n",
    "a tuned value": "[arms]\na = ''\n[tune]\nflag = '--algorithm'\nvalues = ['fedavg', 'evilcode:Rule']\n",
    "a part's arm": "[arms]\na = '--algorithm fedavg'\n[parts.more.arms]\nx = '--algorithm evilcode:Rule'\n",
}


@pytest.mark.parametrize("where", list(NAMING))
@pytest.mark.parametrize("verb", ["status", "page", "run"])
def test_a_study_files_code_is_never_imported_without_trust_code(here: Path, capsys, verb: str, where: str) -> None:
    name = write(here, NAMING[where] + "[page]\nout = 'p.md'\nstored = 'p.json'\ntext = 'x'\n")
    line = refused_in_one_line(capsys, verb, name)
    assert "names code 'evilcode:" in line and "--trust-code" in line
    assert not (here / "ran").exists() and not (here / "runs").exists() and not (here / "p.md").exists()


def test_run_with_trust_code_imports_what_the_study_file_names(here: Path, capsys) -> None:
    """The user typed the switch: the rule is imported (its marker written); the cell's other
    setting is then refused in one line, so nothing trains here."""
    name = write(here, "[arms]\na = '--algorithm evilcode:Rule --lr fast'\n")
    line = refused_in_one_line(capsys, "run", name, "--trust-code")
    assert (here / "ran").exists() and "lr: 'fast' is not a finite number" in line


def test_fedpfn_and_flowers_own_classes_need_no_flag(here: Path, capsys) -> None:
    name = write(here, "[arms]\na = '--server flwr.serverapp.strategy:FedMedian'\n")
    code, lines, out = study(capsys, "status", name)
    assert code == 0 and lines == [] and out.splitlines()[0] == "runs/s/a/s0  missing"


def test_a_page_from_its_stored_results_alone_imports_nothing(here: Path, capsys) -> None:
    """--stored reads no cell, so a study naming code may still write its page from stored results."""
    stored = '{"study": "s.toml", "cells": [], "chosen": null}'
    (here / "p.json").write_text(stored)
    name = write(here, NAMING["an arm's rule"] + "[page]\nout = 'p.md'\nstored = 'p.json'\ntext = '# P\\n'\n")
    code, lines, out = study(capsys, "page", "--stored", name)
    assert code == 0 and out == "wrote p.md\n" and not (here / "ran").exists()


# --- children: the processes a study starts see nothing of the current folder first -------------

SHADOW = "import pathlib\npathlib.Path(__file__).with_name('shadowed').write_text('ran')\nraise SystemExit('planted')\n"


def test_a_python_child_imports_nothing_from_the_current_folder(tmp_path: Path, monkeypatch) -> None:
    """The one helper every child goes through; a plain `python -c` in the same folder would run the plant."""
    from fedpfn.runtime.children import python_child

    monkeypatch.chdir(tmp_path)
    (tmp_path / "torch.py").write_text(SHADOW)
    argv, env = python_child("-c", "import torch, fedpfn; print(torch.__file__)")
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and not (tmp_path / "shadowed").exists() and "site-packages" in done.stdout
    plain = subprocess.run([sys.executable, "-c", "import torch"], capture_output=True, text=True, timeout=60)
    assert plain.returncode != 0 and (tmp_path / "shadowed").exists()  # the plant would have run


@pytest.mark.slow  # two 1-round cells in processes of their own: about 20 to 40 s on 2 busy cores
def test_the_cells_jobs_start_never_import_a_planted_torch(tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "torch.py").write_text(SHADOW)
    name = write(tmp_path, "[arms]\na = '--algorithm fedavg'\nb = '--algorithm fedprox'\n")
    assert fedpfn(["study", "run", name, "--jobs", "2"]) == 0, capsys.readouterr()
    assert not (tmp_path / "shadowed").exists()
    assert (tmp_path / "runs/s/a/s0/summary.json").is_file() and (tmp_path / "runs/s/b/s0/summary.json").is_file()
