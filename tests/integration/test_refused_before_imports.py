"""A `fedpfn` command refused for its input is refused before torch, Flower and the runtime load.

The standard: bad input gets its one line and exit code 2 before any expensive start-up. A study
command reads its file, its verb's flags, the arms it names and the code the file names before
it imports what running a cell needs (fedpfn.study.commands, fedpfn.study.runner, the runtime);
imported, those would cost seconds of every refusal. `fedpfn run` checks its settings, declared
beside the models (torch) and Flower's strategies, before it imports the simulation, the server
and what they bring (SciPy). Each case runs the installed command's `main` in a fresh interpreter
(a subprocess: this folder) and reads, after the refusal, which heavy modules it had imported.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

# what a refusal must not wait for: torch, Flower, Ray, SciPy, matplotlib, and the runtime's run path
HEAVY = ("torch", "flwr", "ray", "scipy", "matplotlib", "fedpfn.core.config", "fedpfn.runtime.ensure",
         "fedpfn.runtime.simulation", "fedpfn.runtime.server")  # fmt: skip
SETTINGS = {"torch", "flwr", "fedpfn.core.config"}  # what `fedpfn run`'s declared settings import
PROBE = f"""
import json, sys
from fedpfn.cli.main import main
try:
    code = main(sys.argv[1:])
finally:
    print(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))
sys.exit(code)
"""
STUDY = """
title = "two arms"
runs = "runs/two"
seeds = [0]
shared = "--dataset fmnist --model mlp --rounds 1"
baseline = "fedavg"

[arms]
fedavg = "--algorithm fedavg"
fedpfn = "--algorithm fedpfn"
mine = "--algorithm fedavg --server mine.rules:Rule"
"""
CASES = [
    (["study", "run", "no/such/file.toml"], "error: study: file 'no/such/file.toml' does not exist"),
    (["study", "status", "two.toml", "--bogus"], "fedpfn study status: unknown flag --bogus"),
    (["study", "run", "two.toml", "--trust-code", "--jobs", "0"], "error: --jobs 0: give a whole number"),
    (["study", "run", "two.toml", "--trust-code", "--arm", "nosuch"], "--arm nosuch: not an arm of"),
    (["study", "run", "two.toml"], "give --trust-code (fedpfn study run two.toml --trust-code)"),
    (["study", "status", "two.toml"], "fedpfn study status never imports a study file's own code"),
    (["compare", "--seeds", "0"], "error: fedpfn compare: give the algorithms first"),
    (["rum"], "error: unknown verb 'rum'; did you mean run?"),
    (["partition", "--to", "0"], "fedpfn partition: argument --to: expected PARTITION=FOLDER, got '0'"),
]


def refused(argv: list[str], folder: Path, said: str) -> set[str]:
    """The heavy modules imported when `fedpfn ARGV`, run in `folder`, was refused with the one line `said`."""
    done = subprocess.run([sys.executable, "-c", PROBE, *argv], cwd=folder, capture_output=True, text=True,
                          timeout=180)  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert len(done.stderr.splitlines()) == 1 and said in done.stderr, done.stderr
    return set(json.loads(done.stdout.splitlines()[-1]))


@pytest.mark.parametrize(("argv", "said"), CASES, ids=[" ".join(argv) for argv, _ in CASES])
def test_a_refused_command_imports_nothing_heavy(tmp_path: Path, argv: list[str], said: str):
    (tmp_path / "two.toml").write_text(STUDY)
    assert refused(argv, tmp_path, said) == set()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["two.toml"]  # nothing written: no runs folder


def test_a_refused_setting_of_fedpfn_run_comes_before_the_simulation_loads(tmp_path: Path):
    imported = refused(["run", "--rounds", "0", "--out", "out"], tmp_path, "error: rounds: 0 must be at least 1")
    assert imported <= SETTINGS and list(tmp_path.iterdir()) == []


def test_the_probe_sees_what_a_run_imports(tmp_path: Path):
    """The same probe, on a cell whose flag only `fedpfn run`'s checks refuse: refused in one line
    too, and torch is then among what it reads (so the cases above could fail)."""
    (tmp_path / "two.toml").write_text(STUDY.replace("--rounds 1", "--rounds 0").replace('mine = "', '# "'))
    assert "torch" in refused(["study", "status", "two.toml"], tmp_path, "rounds: 0 must be at least 1")
