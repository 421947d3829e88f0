"""Issue 35's classes: a run folder from someone else is data, never code; writes stay where they
belong; no value exhausts the machine; the first second and the last refusal are as clean as the rest.

Every refusal below is one line, exit 2, with the run folder and every file outside it byte for
byte as they were and no marker file (what planted code would write if it ran). In-process
wherever the refusal comes before an engine starts; the signal test launches run_sim.py itself.
"""

from __future__ import annotations

import itertools
import json
import os
import pickle
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from fedpfn.analysis.report import main as report_main
from fedpfn.cli.partition import run_config as partition_config
from fedpfn.core.data import DataError
from fedpfn.runtime.runfolder import RunFolder, read_tree
from tests.support.commands import ENV, passes_checks, refused, snapshot, toml
from tests.support.folders import OUTSIDE, edit_config, resumable_run, write_run

ROOT = Path(__file__).resolve().parents[2]
EVIL = "import pathlib\npathlib.Path({marker!r}).write_text('ran')\nclass S:\n    pass\n"


class Scene:
    """A run folder, a file outside it, and a marker that planted code would write."""

    def __init__(self, tmp_path: Path) -> None:
        self.folder = resumable_run(tmp_path / "run")
        self.outside = tmp_path / "outside"
        self.outside.write_bytes(OUTSIDE)
        self.marker = tmp_path / "ran"
        self.before = snapshot(self.folder.path)

    def refused(self, capsys, monkeypatch, *args: str, expected: str) -> None:
        """One line holding `expected`, exit 2 (refused() asserts it), nothing changed, nothing ran."""
        lines = refused(capsys, monkeypatch, *args)
        assert len(lines) == 1 and expected in lines[0], lines
        self.unchanged()

    def unchanged(self) -> None:
        assert snapshot(self.folder.path) == self.before
        assert self.outside.read_bytes() == OUTSIDE and not self.marker.exists()


# --- code from a file ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "server,checkpoint", [("evilmod:S", "deleted"), ("evilmod:S", "forged"), ("this:S", "forged")]
)
def test_a_run_folder_never_names_code_that_runs(tmp_path, capsys, monkeypatch, server, checkpoint):
    """config.json names a module in the current folder (or the standard library's `this`, which
    prints on import); with the checkpoint deleted, or rewritten to the edited settings."""
    monkeypatch.chdir(tmp_path)
    scene = Scene(tmp_path)
    (tmp_path / "evilmod.py").write_text(EVIL.format(marker=str(scene.marker)))
    edit_config(scene.folder.path, server=server)
    if checkpoint == "deleted":
        (scene.folder.path / "checkpoint.npz").unlink()
    else:
        from fedpfn.runtime.algorithms import parse_config

        tree = {"round": 1, "elapsed_seconds": 1.0, "model": {"w": np.zeros(1)}, "strategy": {}}
        scene.folder.save_checkpoint(parse_config(scene.folder.read_config()).fingerprint(), tree)
    scene.before = snapshot(scene.folder.path)
    expected = f"resume: the run's server is the class '{server}', which only its config.json names"
    scene.refused(capsys, monkeypatch, "--resume", str(scene.folder.path), "--rounds", "2", expected=expected)
    assert "Zen of Python" not in capsys.readouterr().out
    if checkpoint == "deleted":  # given again, it must be the run's class
        expected = f"which only its config.json names; this command names 'fedavg'"
        scene.refused(
            capsys, monkeypatch, "--resume", str(scene.folder.path), "--server", "fedavg", expected=expected
        )


def test_compare_reports_export_and_flwr_run_never_import_what_a_folder_names(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    scene = Scene(tmp_path)
    (tmp_path / "evilmod.py").write_text(EVIL.format(marker=str(scene.marker)))
    edit_config(scene.folder.path, server="evilmod:S")
    scene.before = snapshot(scene.folder.path)
    cmp_run = tmp_path / "cmp" / "fedavg-s0"  # a comparison's sub-run, edited the same way
    cmp_run.parent.mkdir()
    os.rename(scene.folder.path, cmp_run)
    lines = refused(capsys, monkeypatch, "--compare", "fedavg,fedpfn", "--out", str(tmp_path / "cmp"), "--model", "mlp",
                    "--num-clients", "4", "--clients-per-round", "2", "--partition", "iid", "--rounds", "2")  # fmt: skip
    assert (
        len(lines) == 2
        and "holds a run with other settings" in lines[1]
        and "server evilmod:S != fedavg" in lines[1]
    )
    os.rename(cmp_run, scene.folder.path)
    from fedpfn.runtime.algorithms import parse_config
    from fedpfn.runtime.server_app import resumes_in_place

    with pytest.raises(
        RuntimeError, match="holds a run of other settings"
    ):  # flwr run: its settings are typed
        resumes_in_place(parse_config({**scene.folder.read_config(), "server": "fedavg"}))
    cfg = partition_config(scene.folder.path / "config.json", [])
    assert cfg.server == "fedavg"  # the partition needs no server: the one named is left out, never imported
    report_main([str(scene.folder.path), "--out", str(tmp_path / "report")])  # reports read values only
    scene.unchanged()


# --- writes where they do not belong ------------------------------------------------------------


def test_a_hard_link_is_refused_like_a_symbolic_one(tmp_path, capsys, monkeypatch):
    scene = Scene(tmp_path)
    (scene.folder.path / "run.log").unlink(missing_ok=True)
    os.link(scene.outside, scene.folder.path / "run.log")  # an append to run.log would land in the victim
    scene.before = snapshot(scene.folder.path)
    expected = "holds hard links (files with another name) (run.log)"
    scene.refused(capsys, monkeypatch, "--resume", str(scene.folder.path), expected=expected)
    scene.refused(capsys, monkeypatch, "--overwrite", "--out", str(scene.folder.path), expected=expected)


def test_a_refused_resume_makes_no_data_root_and_a_forged_state_touches_nothing(
    tmp_path, capsys, monkeypatch
):
    scene = Scene(tmp_path)
    root = tmp_path / "new-data-root"
    edit_config(scene.folder.path, data_root=str(root), download=True)  # the checkpoint rewritten to match
    scene.folder.save_checkpoint(parse_fingerprint(scene.folder), saved_tree(scene.folder))
    scene.before = snapshot(scene.folder.path)
    expected = (
        f"resume: data root {root} does not exist, and only the run's config.json asks to download it there"
    )
    scene.refused(capsys, monkeypatch, "--resume", str(scene.folder.path), expected=expected)
    assert not root.exists()
    edit_config(scene.folder.path, data_root=None, download=False)
    (scene.folder.path / "summary.json").write_text("{}")  # finished: a resume --rounds 3 would unfinish it
    tree = {**saved_tree(scene.folder), "strategy": {"forged": 1}}  # its model and round sound
    scene.folder.save_checkpoint(parse_fingerprint(scene.folder), tree)
    scene.before = snapshot(scene.folder.path)
    expected = "checkpoint.npz is damaged (its strategy state: KeyError 'inner')"
    scene.refused(capsys, monkeypatch, "--resume", str(scene.folder.path), "--rounds", "3", expected=expected)


def saved_tree(folder: RunFolder) -> dict:
    return {k: v for k, v in read_tree(folder.path / "checkpoint.npz").items() if k != "meta"}


def parse_fingerprint(folder: RunFolder) -> dict:
    from fedpfn.runtime.algorithms import parse_config

    return parse_config(folder.read_config()).fingerprint()


def test_out_never_lands_in_a_system_folder(tmp_path, capsys, monkeypatch):
    name = f"fedpfn-test-{os.getpid()}"
    lines = refused(capsys, monkeypatch, "--model", "mlp", "--out", f"/dev/shm/../{name}")
    assert lines == [
        f"error: out: '/dev/{name}' lies in /dev, the system's, not a place for a run; give another folder"
    ]
    assert not Path(f"/dev/{name}").exists()


# --- resources a value can exhaust --------------------------------------------------------------


def test_sizes_a_value_gives_are_bounded_before_allocation(tmp_path, capsys, monkeypatch):
    scene = Scene(tmp_path)
    (scene.folder.path / "checkpoint.npz").unlink()
    os.mkfifo(scene.folder.path / "checkpoint.npz")  # a read would wait forever
    scene.before = snapshot(scene.folder.path)
    expected = "holds entries that are not regular files (checkpoint.npz)"
    scene.refused(capsys, monkeypatch, "--resume", str(scene.folder.path), expected=expected)
    out = ["--model", "mlp", "--out", str(tmp_path / "new")]
    scene.refused(capsys, monkeypatch, "--projection-head", "1000000000", *out,
                  expected="projection_head: 1000000000 must be in [0, 8192]")  # fmt: skip
    nested = "[" * 30_000 + "]" * 30_000
    scene.refused(capsys, monkeypatch, "--server", "flwr.serverapp.strategy:FedAvg", "--server-args", nested, *out,
                  expected="server_args: '[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[...' nests deeper than 8 levels")  # fmt: skip
    assert not (tmp_path / "new").exists()


def test_a_cifar_batch_of_one_list_referenced_many_times_is_refused_before_numpy_copies_it(tmp_path):
    from fedpfn.core.data import _read_cifar_batch

    row = list(range(256)) * 12  # one 3072-value image, referenced 50,000 times: 1.2 GB as an array
    batch = tmp_path / "data_batch_1"
    batch.write_bytes(pickle.dumps({"data": [row] * 50_000, "labels": [0] * 50_000}, protocol=2))
    assert batch.stat().st_size < 250_000  # the was 206 KB
    started = time.monotonic()
    with pytest.raises(DataError, match="'data' is a list, not an array"):
        _read_cifar_batch(batch, "labels")
    nested = tmp_path / "labels_batch"
    nested.write_bytes(pickle.dumps({"data": np.zeros((2, 3072), np.uint8), "labels": [row] * 2}, protocol=2))
    with pytest.raises(DataError, match="'labels' is not a list of whole numbers"):
        _read_cifar_batch(nested, "labels")
    assert time.monotonic() - started < 2


# --- the edges of a run's life -------------------------------------------------------------------


def interpreter_start() -> float:
    """Seconds this machine's Python takes to run its first line: before it, no program can
    handle a signal (2 shared cores under load took 0.17 s), so the delays below count from it."""
    started = time.monotonic()
    subprocess.run([sys.executable, "-c", "pass"], check=True, env=ENV)
    return time.monotonic() - started


def test_a_stop_in_the_first_half_second_is_one_line_and_the_right_code(tmp_path):
    """SIGINT and SIGTERM 0.1, 0.3 and 0.5 s in (imports, the resume's checks), on both engines."""
    folder = resumable_run(tmp_path / "run")
    before = snapshot(folder.path)
    for engine, delay, stop in itertools.product(
        ("batched", "ray"), (0.1, 0.3, 0.5), (signal.SIGINT, signal.SIGTERM)
    ):
        start = interpreter_start()
        args = [sys.executable, "run_sim.py", "--resume", str(folder.path), "--engine", engine]
        proc = subprocess.Popen(
            args, cwd=ROOT, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        time.sleep(start + delay)
        proc.send_signal(stop)
        _, err = proc.communicate(timeout=30)
        assert proc.returncode == 128 + stop, (engine, delay, stop, proc.returncode, start, err[-800:])
        lines = [line for line in err.splitlines() if line.strip()]
        stopped = "stopped before the run started; nothing was written"  # (to DIR: in simulate's checks)
        assert len(lines) == 1 and lines[0].startswith(stopped), (engine, delay, err[-800:])
    assert snapshot(folder.path) == before


def test_the_continue_line_pastes_into_a_shell(tmp_path):
    folder = RunFolder(tmp_path / "it's a run")
    line = folder.stop_message()
    assert shlex.split(line.split("continue with: ")[1]) == ["fedpfn", "resume", str(folder.path)]


# --- silently unused flags and second lines ----------------------------------------------------

UNUSED = [
    (["--anchor-ratio", "0.4"], "anchor_ratio: 0.4 is set, but fedavg with server fedavg does not use it"),
    (["--prox-mu", "0.01"], "prox_mu: 0.01 is set, but fedavg with server fedavg does not use it"),
    (["--alpha", "0.5", "--partition", "iid"], "alpha: 0.5 is set, but only --partition dirichlet uses it"),
    (["--shards-per-client", "2"], "shards_per_client: 2 is set, but only --partition shards uses it"),
    (
        ["--alignment-clients", "3"],
        "alignment_clients: 3 is set, but only --alignment-every K (K > 0) uses it",
    ),
    (
        ["--client-cpus", "1"],
        "client_cpus: 1.0 is set, but the batched engine uses it only with --engine-mode loop",
    ),
    (
        ["--engine-mode", "threads", "--engine-chunk", "0"],
        "engine_chunk: 0 is set, but only the batched engine's vmap",
    ),
    (
        ["--engine", "ray", "--engine-mode", "vmap"],
        "engine_mode: vmap is set, but only --engine batched uses it",
    ),
    (["--engine", "ray", "--engine-workers", "2"], "engine_workers: 2 is set, but only --engine batched uses it (Ray actors for its vmap, threads and loop modes)"),
    (["--engine-mode", "loop", "--engine-chunk", "4"], "engine_chunk: 4 is set, but only the batched engine's vmap"),
    (["--partition", "shards", "--alpha", "-1"], "alpha: -1.0 must be > 0"),  # its own check first
    (
        ["--alignment-every", "1", "--alignment-clients", "11"],
        "alignment_clients: 11 must be at most clients_per_round",
    ),
    (["--num-clients", "5", "--clients-per-round", "NaN"], "clients_per_round: 'NaN' is not an integer"),
    (["--num-clients", "0"], "num_clients: 0 must be at least 1"),
    (["--optimizer", "lbfgs"], "optimizer: unknown 'lbfgs'; use one of sgd, adam"),
]


@pytest.mark.parametrize("args,message", UNUSED, ids=[" ".join(a)[:40] for a, _ in UNUSED])
def test_a_given_flag_the_run_would_not_use_is_refused_at_any_value(
    tmp_path, capsys, monkeypatch, args, message
):
    """Each at its declared default where it has one: given is given. One line, never a consequence."""
    scene = Scene(tmp_path)
    scene.refused(
        capsys, monkeypatch, *args, "--model", "mlp", "--out", str(tmp_path / "new"), expected=message
    )
    assert not (tmp_path / "new").exists()


def test_a_resume_refuses_a_setting_of_the_engine_it_moves_to_that_the_engine_would_not_use(tmp_path, capsys, monkeypatch):
    """Moved to Ray, the batched engine's mode has no place: given, it is refused, one line."""
    scene = Scene(tmp_path)
    expected = "engine_mode: loop is set, but only --engine batched uses it"
    scene.refused(capsys, monkeypatch, "--resume", str(scene.folder.path), "--engine", "ray", "--engine-mode", "loop",
                  expected=expected)  # fmt: skip


def test_a_preset_gives_settings_as_the_command_line_does(tmp_path, capsys, monkeypatch):
    out = ["--model", "mlp", "--out", str(tmp_path / "new")]
    lines = refused(capsys, monkeypatch, "--config", toml(tmp_path, "alpha = 0.5\npartition = 'iid'\n"), *out)
    assert lines == ["error: alpha: 0.5 is set, but only --partition dirichlet uses it"]
    assert passes_checks(monkeypatch, "--alpha", "0.5", *out)  # where it is used, it passes


# --- one line, never a usage dump; the right exit code -------------------------------------------


def test_the_report_and_export_partition_refuse_in_one_line(tmp_path, capsys, monkeypatch):
    run = write_run(tmp_path / "runs" / "fedavg-s0", [0.5, 0.6])
    for flags, message in ((["--last-k", "0"], "'0' is not a whole number of rounds >= 1"),
                           (["--target", "nan"], "'nan' is not an accuracy in (0, 1]")):  # fmt: skip
        with pytest.raises(SystemExit) as code:
            report_main([str(run), *flags])
        err = capsys.readouterr().err.splitlines()
        assert code.value.code == 2 and len(err) == 1 and message in err[0], err
    folder = resumable_run(tmp_path / "run")
    from fedpfn.cli import partition as export

    (tmp_path / "file").write_bytes(OUTSIDE)
    config = ["--config", str(folder.path / "config.json")]
    for to, message in ((["--to", "zero"], "expected PARTITION=FOLDER, got 'zero'"),
                        (["--to", f"0={tmp_path / 'file'}"], f"--to: '{tmp_path / 'file'}' is a file; give a folder"),
                        (["--to", f"0={tmp_path / 'a'}", "--to", f"0={tmp_path / 'b'}"], "partition 0 is given twice"),
                        (["--to", f"0={tmp_path / 'a'}", "--to", f"1={tmp_path / 'a'}"], "/a is given twice")):  # fmt: skip
        try:
            code = export.main([*config, *to])
        except SystemExit as stop:  # argparse's own refusal
            code = stop.code
        err = capsys.readouterr().err.splitlines()
        assert code == 2 and len(err) == 1 and message in err[0], err
    assert (tmp_path / "file").read_bytes() == OUTSIDE and not (tmp_path / "a").exists()


# --- a resume continues in the mode it started in -------------------------------------------------


def test_a_resume_keeps_the_mode_the_run_started_in_unless_asked(tmp_path, capsys, monkeypatch):
    out = tmp_path / "run"
    flags = ["--model", "mlp", "--num-clients", "4", "--clients-per-round", "2", "--partition", "iid", "--rounds",
             "2", "--out", str(out)]  # fmt: skip
    assert passes_checks(monkeypatch, *flags)
    assert json.loads((out / "config.json").read_text())["engine_mode"] == "processes"  # auto, as it resolved here
    started = []
    from tests.support.commands import no_engine_starts

    no_engine_starts(monkeypatch, lambda run, tracker, app: started.append(run.cfg))
    for extra, warned in (([], False), (["--engine", "ray"], False), (["--engine", "batched", "--engine-mode", "vmap"], True)):
        capsys.readouterr()
        with pytest.raises(RuntimeError, match="ended without finishing"):
            import run_sim

            run_sim.main(["--resume", str(out), *extra])
        err = capsys.readouterr().err
        assert ("within rounding, not bit for bit" in err) == warned, err  # processes and Ray: the same sums
    assert [(cfg.engine.name, cfg.engine.mode) for cfg in started] == [("batched", "processes"), ("ray", None), ("batched", "vmap")]
