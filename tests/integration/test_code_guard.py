"""A folder is data, whatever path code arrives by: every name that becomes code passes one guard
(fedpfn.core.user_code), which imports a dotted path only when the command itself names it.

Each case plants a module that writes a marker file when it runs, names it the way an attacker
with write access to a folder (or a careless user) could, and checks the one-line refusal and
that the marker never appears. In-process: nothing here trains.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import numpy as np
import pytest

from fedpfn.cli import partition
from fedpfn.core.settings import ConfigError
from fedpfn.core.user_code import import_user_class, name_code
from fedpfn.runtime.algorithms import parse_config
from fedpfn.runtime.server_app import resumes_in_place
from tests.support.commands import refused
from tests.support.folders import edit_config, resumable_run

RULE = (
    "import pathlib\npathlib.Path({marker!r}).write_text('ran')\n"
    "from clients.base import ClientRule\nclass Rule(ClientRule):\n    name = 'evil'\n"
)


@pytest.fixture
def planted(tmp_path, monkeypatch) -> Path:
    """evilrule.py in the current folder (which a user's own rule may lie in); its marker."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "evilrule", raising=False)
    (tmp_path / "evilrule.py").write_text(RULE.format(marker=str(tmp_path / "ran")))
    return tmp_path / "ran"


def folder_naming(tmp_path: Path, algorithm: str, checkpoint: bool):
    """A killed run whose config.json was edited to name `algorithm`; its checkpoint kept (and its
    fingerprint forged to match, as anyone can recompute it) or deleted."""
    folder = resumable_run(tmp_path / "runs" / "x")
    edit_config(folder.path, algorithm=algorithm)
    if checkpoint:
        name_code(algorithm)  # the forger's own process may import it; the victim's is another
        forged = parse_config(folder.read_config()).fingerprint()
        tree = {"round": 1, "elapsed_seconds": 1.0, "model": {"w": np.zeros(1)}, "strategy": {}}
        folder.save_checkpoint(forged, tree)
    else:
        (folder.path / "checkpoint.npz").unlink()
    return folder


@pytest.mark.parametrize("checkpoint", [False, True], ids=["no checkpoint", "forged fingerprint"])
def test_a_resume_never_runs_a_rule_that_only_config_json_names(tmp_path, planted, capsys, monkeypatch, checkpoint):
    if checkpoint:  # the forger's import must not count: a fresh process has named nothing
        monkeypatch.setattr("fedpfn.core.user_code._NAMED_BY_COMMAND", set())
    folder = folder_naming(tmp_path, "evilrule:Rule", checkpoint)
    planted.unlink(missing_ok=True)
    monkeypatch.setattr("fedpfn.core.user_code._NAMED_BY_COMMAND", set())
    monkeypatch.delitem(sys.modules, "evilrule", raising=False)
    lines = refused(capsys, monkeypatch, "--resume", str(folder.path), "--rounds", "2")
    assert lines == [
        "error: resume: the run's client rule is the class 'evilrule:Rule', which only its config.json names; "
        "fedpfn imports code a command names, never a file: pass --algorithm evilrule:Rule to resume it"
    ]
    lines = refused(capsys, monkeypatch, "--resume", str(folder.path), "--algorithm", "fedprox")
    assert "this command names 'fedprox'" in lines[0], lines  # given, but not the same
    assert not planted.exists()


def test_a_standard_library_program_named_by_a_folder_never_runs(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    folder = folder_naming(tmp_path, "venv.__main__:X", checkpoint=False)
    lines = refused(capsys, monkeypatch, "--resume", str(folder.path))
    assert "the run's client rule is the class 'venv.__main__:X'" in lines[0], lines
    lines = refused(capsys, monkeypatch, "--algorithm", "venv.__main__:X", "--out", str(tmp_path / "typed"))
    assert lines == ["error: algorithm: 'venv.__main__' is a program's entry point, not a module that holds a rule"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["runs"]  # no virtual environment made


@pytest.mark.parametrize(("flag", "noun"), [("--algorithm", "rule"), ("--server", "strategy"), ("--model", "model builder")])
def test_a_standard_library_module_is_refused_before_its_import_runs(flag, noun, tmp_path, capsys, monkeypatch):
    """`--algorithm this:X` printed Python's Zen before its refusal (issue 58): the standard library
    holds no rule, strategy, model or dataset, and its modules may act on import (`antigravity`)."""
    monkeypatch.delitem(sys.modules, "this", raising=False)
    lines = refused(capsys, monkeypatch, flag, "this:X", "--out", str(tmp_path / "run"))
    assert lines == [
        f"error: {flag[2:]}: 'this' is a module of Python's standard library, which holds no {noun}; "
        "name a module of your own (package.module:Name), not one of the standard library's names"
    ]
    assert "this" not in sys.modules and "Beautiful is better than ugly" not in capsys.readouterr().out
    assert not (tmp_path / "run").exists()


def test_resuming_from_inside_the_folder_never_imports_a_module_lying_there(tmp_path, capsys, monkeypatch):
    """A folder that holds only config.json is a run folder to the resume that names it."""
    folder = tmp_path / "handed-over"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"algorithm": "evilrule:Rule"}))
    (folder / "evilrule.py").write_text(RULE.format(marker=str(tmp_path / "ran")))
    monkeypatch.chdir(folder)
    monkeypatch.delitem(sys.modules, "evilrule", raising=False)
    path_before = list(sys.path)
    lines = refused(capsys, monkeypatch, "--resume", ".", "--algorithm", "evilrule:Rule")
    found = "lies in the run folder" in lines[0] or "No module named 'evilrule'" in lines[0]  # on sys.path or not
    assert lines[0].startswith("error: algorithm: ") and found, lines
    assert not (tmp_path / "ran").exists() and sys.path == path_before


def test_a_partition_export_never_runs_a_rule_that_only_config_json_names(tmp_path, planted, capsys, monkeypatch):
    folder = folder_naming(tmp_path, "evilrule:Rule", checkpoint=False)
    monkeypatch.setattr("fedpfn.core.user_code._NAMED_BY_COMMAND", set())
    code = partition.main(["--config", str(folder.path / "config.json"), "--to", f"0={tmp_path / 'p0'}"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "'evilrule:Rule' is code that only a file names" in err[0], err
    assert not planted.exists() and not (tmp_path / "p0").exists()


def test_flwr_run_never_runs_a_rule_that_only_the_out_folder_names(tmp_path, planted, monkeypatch):
    from tests.support.config import tiny_config

    folder = folder_naming(tmp_path, "evilrule:Rule", checkpoint=False)
    monkeypatch.setattr("fedpfn.core.user_code._NAMED_BY_COMMAND", set())
    with pytest.raises(ConfigError, match="'evilrule:Rule' is code that only a file names"):
        resumes_in_place(tiny_config(out=str(folder.path)))
    assert not planted.exists()


def test_a_preset_alone_never_chooses_code(tmp_path, planted, capsys, monkeypatch):
    preset = tmp_path / "preset.toml"
    preset.write_text('algorithm = "evilrule:Rule"\n')
    monkeypatch.setattr("fedpfn.core.user_code._NAMED_BY_COMMAND", set())
    lines = refused(capsys, monkeypatch, "--config", str(preset), "--out", str(tmp_path / "out"))
    assert "'evilrule:Rule' is code that only a file names" in lines[0], lines
    assert not planted.exists()


MISBEHAVING = {
    "exits": ("raise SystemExit(0)\n", "cannot import module 'userrule' (SystemExit: 0)"),
    "nameless": ("from clients.base import ClientRule\nclass Rule(ClientRule):\n    pass\n",
                 "'userrule:Rule' has no `name` of its own"),  # fmt: skip
    "core clash": (
        "from dataclasses import dataclass\nfrom clients.base import ClientRule\n"
        "@dataclass(frozen=True)\nclass P:\n    lr: float = 0.1\n"
        "class Rule(ClientRule):\n    name = 'mine'\n    Params = P\n",
        "declares the setting 'lr', which is a core setting; rename it",
    ),
    "name clash": (  # its settings would share fedprox's namespace (fedprox.prox_mu)
        "from clients.base import ClientRule\nclass Rule(ClientRule):\n    name = 'fedprox'\n",
        "is named 'fedprox', as another algorithm is; give it a name of its own",
    ),
    "dotted name": (
        "from clients.base import ClientRule\nclass Rule(ClientRule):\n    name = 'my.rule'\n",
        "is named 'my.rule', which is not letters, digits, '_' and '-'",
    ),
}


@pytest.mark.parametrize("case", MISBEHAVING)
def test_a_users_rule_that_misbehaves_is_refused_in_one_line(tmp_path, capsys, monkeypatch, case):
    source, reason = MISBEHAVING[case]
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "userrule", raising=False)
    (tmp_path / "userrule.py").write_text(source)
    lines = refused(capsys, monkeypatch, "--algorithm", "userrule:Rule", "--out", str(tmp_path / "out"))
    assert len(lines) == 1 and reason in lines[0], lines
    assert not (tmp_path / "out").exists()
    from clients import CLIENT_RULES

    assert "userrule:Rule" not in CLIENT_RULES  # nothing half-registered for the next command


def test_the_guard_imports_what_the_command_named_and_nothing_else(tmp_path, planted, monkeypatch):
    from clients.base import ClientRule

    monkeypatch.setattr("fedpfn.core.user_code._NAMED_BY_COMMAND", set())
    with pytest.raises(ConfigError, match="only a file names"):
        import_user_class("evilrule:Rule", "algorithm", ClientRule, "a rule", "rule")
    assert not planted.exists()
    name_code("fedpfn+evilrule:Rule")  # an anchor method over the user's rule names the rule
    assert import_user_class("evilrule:Rule", "algorithm", ClientRule, "a rule", "rule").name == "evil"
    assert planted.exists()
    assert os.getcwd() == str(tmp_path)


# --- the processes a command starts import nothing from the user's current folder ---------------

SHADOW = "import pathlib\npathlib.Path(__file__).with_name('ran').write_text('ran')\nraise SystemExit('planted')\n"


@pytest.mark.slow  # Ray's start-up and one round: about 30 s idle
def test_ray_workers_import_the_users_rule_and_nothing_else_from_the_current_folder(tmp_path):
    """Ray puts the driver's folder first on its workers' path; fedpfn starts Ray from an empty one,
    so a `torch.py` left in the folder a user runs from is never imported, while the user's own rule
    there, named by dotted path, reaches the workers (PYTHONPATH, that folder last) and trains."""
    import subprocess
    import textwrap

    from tests.support.user_rule import USER_RULE

    (tmp_path / "torch.py").write_text(SHADOW)
    (tmp_path / "user_rules_test.py").write_text(textwrap.dedent(USER_RULE))
    spec = "user_rules_test:LabelSmoothing"
    fedpfn = Path(sys.executable).with_name("fedpfn")
    flags = ["--engine", "ray", "--algorithm", spec, "--smoothing", "0.3", "--model", "mlp", "--num-clients", "4",
             "--clients-per-round", "2", "--rounds", "1", "--partition", "iid", "--batch-size", "256",
             "--out", str(tmp_path / "run")]  # fmt: skip
    env = {**os.environ, "FLWR_TELEMETRY_ENABLED": "0", "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1"}
    done = subprocess.run([str(fedpfn), "run", *flags], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=240)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert not (tmp_path / "ran").exists()
    saved = json.loads((tmp_path / "run" / "config.json").read_text())
    assert saved["algorithm"] == spec and saved["label_smoothing.smoothing"] == 0.3
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [row["round"] for row in rows] == [1] and np.isfinite(rows[0]["test_accuracy"])


def test_the_resume_a_run_suggests_names_its_code_again(tmp_path):
    """The stop line, the closing line and the out-folder refusal suggest a resume that is accepted."""
    from fedpfn.runtime.runfolder import RunFolder

    folder = resumable_run(tmp_path / "my run")
    assert folder.resume_command() == f"fedpfn resume '{folder.path}'"
    edit_config(folder.path, algorithm="fedpfn+mypkg.rules:Mine", server="flwr.serverapp.strategy:Krum")
    expected = (f"fedpfn resume '{folder.path}' --algorithm fedpfn+mypkg.rules:Mine "
                "--server flwr.serverapp.strategy:Krum --rounds 4")  # fmt: skip
    assert RunFolder(folder.path).resume_command("--rounds", "4") == expected
    assert "continue with: " + expected.removesuffix(" --rounds 4") in RunFolder(folder.path).stop_message()
