"""Issue 42's "Where results go" and "Verbs" classes, and issue 45's unknown flag of the analysis verbs.

Every command's `--out` goes through the one check `fedpfn run` uses (fedpfn.core.places):
nothing under /dev, /proc or /sys however it is reached, a read-only place refused, each in one
line with exit 2 before anything is computed or written. In-process, with the work each command
would start replaced by a failure, so a command that checked too late fails fast instead of training.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from fedpfn.cli.main import main as fedpfn
from tests.support.commands import call
from tests.support.folders import write_run

ROOT = Path(__file__).resolve().parents[2]
NAME = f"fedpfn-test-out-{os.getpid()}"
WORK = {  # what each command would start once its checks passed
    "align": "fedpfn.experiments.lmc.prepare",
    "pretrain": "fedpfn.experiments.pretrain.pretrain",
    "soup": "fedpfn.experiments.soup.prepare",
    "cold": "fedpfn.experiments.cold.read_settings",  # the runs are read only once --out passed
    "report": "fedpfn.analysis.report.analyse",
    "compare": "fedpfn.runtime.compare.run_one",
    "run": "fedpfn.runtime.simulation.check_runnable",  # after the folder is planned, before data or engines
}


def started(*_: object, **__: object) -> None:
    raise AssertionError("work started before --out was checked")


def verb_argv(verb: str, tmp_path: Path, out: str) -> list[str]:
    if verb == "report":
        run = tmp_path / "runs" / "fedavg-s0"
        return ["report", str(run if run.is_dir() else write_run(run, [0.5, 0.6], seed=0)), "--out", out]
    if verb == "compare":
        return ["compare", "fedavg,fedprox", "--seeds", "0,1,2", "--model", "mlp", "--rounds", "1", "--out", out]
    return [verb, "--out", out] + (["--model", "mlp", "--rounds", "1"] if verb == "run" else [])


@pytest.fixture
def guarded(monkeypatch):
    """No command may start its work; whatever a test made in a system folder is removed after it."""
    for target in WORK.values():
        monkeypatch.setattr(target, started)
    made = [Path(top) / NAME for top in ("/dev", "/proc", "/sys")]
    yield made
    for path in made:  # only if a command wrongly made it: this test's own name
        if path.is_dir() and not path.is_symlink():
            for inner in path.iterdir():
                inner.unlink()
            path.rmdir()


def system_places(tmp_path: Path) -> list[tuple[str, str]]:
    (tmp_path / "devlink").symlink_to("/dev")
    return [
        (f"/dev/shm/../{NAME}", "/dev"),
        (str(tmp_path / "devlink" / NAME), "/dev"),
        (f"/proc/{NAME}", "/proc"),
        (f"/sys/{NAME}", "/sys"),
    ]


@pytest.mark.parametrize("verb", list(WORK))
def test_no_out_lands_in_a_system_folder(verb, tmp_path, capsys, guarded):
    for out, system in system_places(tmp_path):
        code, lines = call(capsys, *verb_argv(verb, tmp_path, out))
        said = [line for line in lines if line.startswith("error: out: ")]
        assert code == 2 and len(said) == 1, (out, lines)
        assert f"lies in {system}, the system's, not a place for" in said[0], (out, said)
        assert all(line.startswith("error: ") for line in lines), lines
        assert not any(path.exists() for path in guarded), out


def test_a_partitions_folder_goes_through_the_same_check(tmp_path, capsys, guarded):
    """`fedpfn partition --to I=FOLDER` writes a SuperNode's partition: the same check as every --out."""
    for out, system in system_places(tmp_path):
        argv = ["partition", "--config", str(ROOT / "configs" / "quickstart.toml"), "--to", f"0={out}"]
        code, lines = call(capsys, *argv)
        assert code == 2 and len(lines) == 1 and lines[0].startswith("fedpfn partition: --to: '"), lines
        assert f"lies in {system}, the system's, not a place for partition 0; give another folder" in lines[0]
        assert not Path(system, NAME).exists()


@pytest.mark.parametrize("verb", list(WORK))
def test_a_read_only_place_is_refused_in_one_line(verb, tmp_path, capsys, guarded, monkeypatch):
    """A folder on a read-only file system (root ignores permissions, never a read-only mount)."""
    place = tmp_path / "mounted"
    place.mkdir()
    real_statvfs = os.statvfs

    def statvfs(path):
        found = real_statvfs(path)
        if Path(path) == place:
            return os.statvfs_result((*found[:8], found.f_flag | os.ST_RDONLY, *found[9:]))
        return found

    monkeypatch.setattr(os, "statvfs", statvfs)
    code, lines = call(capsys, *verb_argv(verb, tmp_path, str(place / "out")))
    said = [line for line in lines if line.startswith("error: out: ")]
    assert code == 2 and len(said) == 1 and f"('{place}' is on a read-only file system)" in said[0], lines
    assert list(place.iterdir()) == []


# --- verbs -------------------------------------------------------------------------------------


@pytest.mark.parametrize("verb, usage", [("compare", "usage: fedpfn compare ALGOS"), ("resume", "usage: fedpfn resume DIR")])
def test_compare_and_resume_have_their_own_help(verb, usage, capsys):
    assert fedpfn([verb, "--help"]) == 0
    assert capsys.readouterr().out.startswith(usage)


def test_an_empty_item_in_a_comparison_is_refused(capsys, guarded):
    assert call(capsys, "compare", "fedavg,,fedpfn") == (
        2, ["error: compare: 'fedavg,,fedpfn' has an empty item; give a comma-separated list without one"]
    )  # fmt: skip


@pytest.mark.parametrize("verb", ["align", "pretrain", "soup", "cold", "report", "partition"])
def test_an_unknown_flag_is_named_before_a_missing_argument(verb, capsys):
    code, lines = call(capsys, verb, "--nosuch", "1")
    assert code == 2 and len(lines) == 1 and "unknown flag --nosuch" in lines[0], lines
    code, lines = call(capsys, verb, "--out-dir", "x")
    assert code == 2 and len(lines) == 1 and "unknown flag --out-dir" in lines[0], lines


def test_a_near_flag_is_suggested(capsys):
    code, lines = call(capsys, "align", "--model", "mlp", "--anchor_ratios", "0.4")
    assert (code, lines) == (2, ["error: unknown flag --anchor_ratios; did you mean --anchor-ratio? "
                                 "(fedpfn align --help lists every flag)"])  # fmt: skip


@pytest.mark.parametrize(
    "argv, says",
    [
        (["garbage"], "deploy_local.sh: unknown argument 'garbage' (see --help)"),
        (["--nodes", "x"], "deploy_local.sh: --nodes must be a whole number >= 1, got 'x' (see --help)"),
    ],
)
def test_deploy_local_answers_garbage_in_one_line(argv, says):
    done = subprocess.run([sys.executable, "-m", "fedpfn.cli.main", "deploy-local", *argv], capture_output=True,
                          text=True, cwd=ROOT, timeout=120, check=False)  # fmt: skip
    assert (done.returncode, done.stderr) == (2, says + "\n")


@pytest.mark.parametrize(
    "argv, says",
    [
        (["--garbage"], "python benchmarks/bench_engines.py: unknown flag --garbage (--help lists what is accepted)"),
        (["--rounds", "x"], "python benchmarks/bench_engines.py: argument --rounds: invalid int value: 'x' (--help lists what is accepted)"),
    ],
)
def test_bench_answers_garbage_in_one_line(argv, says, capsys, monkeypatch):
    """`fedpfn bench` runs benchmarks/bench_engines.py, whose command line is read first (in-process here)."""
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    import bench_engines

    with pytest.raises(SystemExit) as stop:
        bench_engines.parse_args(argv)
    assert (stop.value.code, capsys.readouterr().err) == (2, says + "\n")


def test_bench_help_names_the_verb_it_was_started_as(capfd):
    """`fedpfn bench --help` said `usage: bench_engines.py` (issue 56)."""
    from fedpfn.cli.main import main

    assert main(["bench", "--help"]) == 0
    assert capfd.readouterr().out.startswith("usage: fedpfn bench [-h] ")
