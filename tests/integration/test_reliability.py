"""What a careless user or an attacker with write access to a run folder can do, and what the tool promises.

Nothing a file names is run; nothing outside the run folder (or the report's folder) is
written, and nothing the tool did not write is deleted; every stop (a signal at start-up or
mid-run, kill -9, a full disk, a folder made read-only) ends cleanly and resumably; bad input
is refused in one line before anything starts. In-process wherever no Ray is needed; the two
signal tests start Ray once each, as a user's run does. The symlink cases check that the file
a link points to is byte for byte what it was.
"""

from __future__ import annotations

import errno
import gzip
import io
import json
import os
import pickle
import signal
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import numpy as np
import pytest

from fedpfn.analysis.report import main as report_main
from fedpfn.core.data import DataError, load_dataset
from fedpfn.core.files import CHECKPOINT, append_text, atomic_write_bytes
from fedpfn.core.settings import ConfigError
from fedpfn.runtime.algorithms import parse_config
from fedpfn.runtime.runfolder import RunFolder, RunWriteError, read_tree
from tests.support.commands import ENV, passes_checks, refused, snapshot, toml
from tests.support.config import tiny_config
from tests.support.folders import OUTSIDE, edit_config, metrics_row, resumable_run, write_run

ROOT = Path(__file__).resolve().parents[2]


# --- nothing a file names is run -----------------------------------------------------------------

EVIL = "import pathlib\npathlib.Path({marker!r}).write_text('ran')\nclass S:\n    pass\n"


def plant_module(folder: Path, marker: Path) -> None:
    """tensorboard/evil.py and a package __init__ in a run folder: each writes `marker` if run."""
    (folder / "tensorboard").mkdir(exist_ok=True)
    (folder / "tensorboard" / "evil.py").write_text(EVIL.format(marker=str(marker)))
    (folder / "tensorboard" / "__init__.py").write_text(EVIL.format(marker=str(marker)))


def test_resume_never_runs_a_server_that_an_edited_config_names(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    marker = tmp_path / "ran"
    folder = resumable_run(tmp_path / "runs" / "x")
    plant_module(folder.path, marker)
    for server in ("runs.x.tensorboard.evil:S", "runs.x.tensorboard:S"):  # the checkpoint rewritten too
        edit_config(folder.path, server=server)
        forged = parse_config(folder.read_config()).fingerprint()  # parsing imports nothing
        tree = {"round": 1, "elapsed_seconds": 1.0, "model": {"w": np.zeros(1)}, "strategy": {}}
        folder.save_checkpoint(forged, tree)
        lines = refused(capsys, monkeypatch, "--resume", str(folder.path))
        assert lines == [f"error: resume: the run's server is the class '{server}', which only its config.json "
                         f"names; fedpfn imports code a command names, never a file: pass --server {server} to "
                         "resume it"]  # fmt: skip
        lines = refused(capsys, monkeypatch, "--resume", str(folder.path), "--server", server)  # typed, still refused
        assert any("lies in the run folder" in line and "never imports code" in line for line in lines), lines
    assert not marker.exists()


def test_no_module_inside_a_run_folder_is_imported_from_any_current_folder(tmp_path, monkeypatch):
    from strategies.registry import load_strategy_class

    marker = tmp_path / "ran"
    folder = resumable_run(tmp_path / "run")
    plant_module(folder.path, marker)
    monkeypatch.setattr("fedpfn.core.user_code._NAMED_BY_COMMAND", {"evil:S", "tensorboard.evil:S"})  # as typed
    monkeypatch.chdir(folder.path / "tensorboard")  # a user working inside a run folder
    path_before = list(sys.path)
    with pytest.raises(ConfigError, match="No module named 'evil'"):
        load_strategy_class("evil:S")  # the current folder is not searched
    assert sys.path == path_before
    monkeypatch.syspath_prepend(str(folder.path))  # nor is a run folder found another way
    monkeypatch.delitem(sys.modules, "tensorboard", raising=False)  # the real one, if a test imported it
    with pytest.raises(ConfigError, match="lies in the run folder .* never imports code from a run folder"):
        load_strategy_class("tensorboard.evil:S")
    assert not marker.exists()


# --- nothing outside the folder is written, nothing the tool did not write is deleted ------------


LINKS = [".fedpfn.lock", "config.json.tmp", "run.log", "metrics.jsonl.tmp", "client_state/0"]


@pytest.mark.parametrize("link", LINKS)
def test_a_link_in_a_run_folder_is_refused_and_its_target_untouched(tmp_path, capsys, monkeypatch, link):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "r1.npz").write_bytes(OUTSIDE)
    (outside / "file").write_bytes(OUTSIDE)
    folder = resumable_run(tmp_path / "run")
    (folder.path / link).parent.mkdir(parents=True, exist_ok=True)
    (folder.path / link).symlink_to(outside if link.startswith("client_state") else outside / "file")
    before = snapshot(outside)
    lines = refused(capsys, monkeypatch, "--resume", str(folder.path))
    assert any(f"holds symbolic links ({link})" in line for line in lines), lines
    lines = refused(capsys, monkeypatch, "--overwrite", "--out", str(folder.path))
    assert any(f"holds symbolic links ({link})" in line for line in lines), lines
    assert snapshot(outside) == before


def test_writes_replace_a_planted_link_and_never_follow_it(tmp_path):
    outside = tmp_path / "outside"
    outside.write_bytes(OUTSIDE)
    (tmp_path / "checkpoint.npz.tmp").symlink_to(outside)
    atomic_write_bytes(tmp_path / "checkpoint.npz", b"new")
    (tmp_path / "metrics.jsonl").symlink_to(outside)
    with pytest.raises(OSError) as err:
        append_text(tmp_path / "metrics.jsonl", "{}\n")
    assert err.value.errno == errno.ELOOP
    assert (tmp_path / "checkpoint.npz").read_bytes() == b"new" and not (tmp_path / "checkpoint.npz.tmp").exists()
    assert outside.read_bytes() == OUTSIDE


def test_overwrite_deletes_exactly_what_the_tool_wrote(tmp_path, capsys, monkeypatch):
    folder = resumable_run(tmp_path / "run")
    lookalikes = ["model_round_finetuned.pt", "draft.tmp", "tensorboard/my_notes.txt", "client_state/0/notes.txt"]
    for name in lookalikes:
        (folder.path / name).parent.mkdir(parents=True, exist_ok=True)
        (folder.path / name).write_bytes(OUTSIDE)
    before = snapshot(folder.path)
    lines = refused(capsys, monkeypatch, "--overwrite", "--out", str(folder.path))
    assert any(f"holds files fedpfn did not write ({', '.join(sorted(lookalikes))})" in line for line in lines), lines
    assert snapshot(folder.path) == before
    for name in lookalikes:
        (folder.path / name).unlink()
    own = ["tensorboard/events.out.tfevents.1.host", "client_state/0/scaffold_c/r1.npz", "model_round_3.pt",
           "checkpoint.npz.tmp", "accuracy.png"]  # fmt: skip
    for name in own:
        (folder.path / name).parent.mkdir(parents=True, exist_ok=True)
        (folder.path / name).write_bytes(b"x")
    with folder.exclusive():
        folder.start({"algorithm": "fedavg"}, overwrite=True)
    assert sorted(p.name for p in folder.path.iterdir()) == ["config.json"]


def test_a_report_replaces_only_its_own_files(tmp_path, capsys):
    run = write_run(tmp_path / "runs" / "fedavg-s0", [0.5, 0.6])
    out = tmp_path / "report"
    out.mkdir()
    (out / "report.md").write_bytes(OUTSIDE)  # the user's
    (tmp_path / "elsewhere.json").write_bytes(OUTSIDE)
    (out / "report.json").symlink_to(tmp_path / "elsewhere.json")
    code = report_main([str(run), "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err, err
    assert f"error: out: {out / 'report.json'} is a symbolic link" in err
    assert f"error: out: {out / 'report.md'} was not written by fedpfn's report" in err
    assert (out / "report.md").read_bytes() == OUTSIDE and (tmp_path / "elsewhere.json").read_bytes() == OUTSIDE
    assert sorted(p.name for p in out.iterdir()) == ["report.json", "report.md"]
    (out / "report.md").unlink()
    (out / "report.json").unlink()
    for _ in range(2):  # its own files, written again
        assert report_main([str(run), "--out", str(out)]) == 0
    (out / "report.md").write_text((out / "report.md").read_text() + "my notes\n")  # edited since: the user's
    assert report_main([str(run), "--out", str(out)]) == 2
    assert (out / "report.md").read_text().endswith("my notes\n")


def test_a_comparison_keeps_a_users_comparison_config(tmp_path):
    from fedpfn.runtime.compare import write_request

    request = {"base": {}, "algorithms": ["fedavg"], "seeds": [0], "command": "x"}
    write_request(tmp_path, request)
    write_request(tmp_path, {**request, "command": "again"})  # its own: replaced
    assert json.loads((tmp_path / "comparison_config.json").read_text())["command"] == "again"
    (tmp_path / "comparison_config.json").write_bytes(OUTSIDE)
    with pytest.raises(ConfigError, match="comparison_config.json was not written by run_sim.py --compare"):
        write_request(tmp_path, request)
    assert (tmp_path / "comparison_config.json").read_bytes() == OUTSIDE


# --- every stop ends cleanly ---------------------------------------------------------------------


def session_processes(session: int) -> list[int]:
    """The live processes of a session (a run started with start_new_session)."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[3]) == session and fields[0] != "Z":
            found.append(int(pid))
    return found


def wait_until(condition, limit: float) -> bool:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return False


@pytest.mark.parametrize(
    "moment", ["start-up", pytest.param("mid-run", marks=pytest.mark.slow)]
)  # mid-run: about 29 s idle
def test_sigterm_exits_143_within_20_s_with_the_resume_line_and_stops_ray(tmp_path, moment):
    """start-up: Ray's processes are starting (the folder is claimed); mid-run: round 1 is recorded
    (its metrics row, then its checkpoint: a stop between the two resumes from round 1, said so)."""
    out = tmp_path / "run"
    flags = ["--engine", "ray", "--model", "mlp", "--num-clients", "4", "--clients-per-round", "2",
             "--rounds", "30", "--partition", "iid", "--out", str(out)]  # fmt: skip
    proc = subprocess.Popen([sys.executable, "run_sim.py", *flags], cwd=ROOT, env=ENV, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)  # fmt: skip
    metrics = out / "metrics.jsonl"

    def ready() -> bool:
        if moment == "start-up":  # claimed, and Ray's processes are coming up
            return (out / "run.log").exists() and len(session_processes(proc.pid)) > 3
        return metrics.exists() and metrics.read_text().count("\n") >= 1 and (out / CHECKPOINT).exists()

    assert wait_until(lambda: ready() or proc.poll() is not None, 240), "the run did not get there in time"
    assert proc.poll() is None, proc.stderr.read()
    asked = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 143 and time.monotonic() - asked < 20, err[-2000:]
    assert "Traceback" not in err and "SIGTERM received" not in err, err[-2000:]
    last = [line for line in err.splitlines() if line.strip()][-1]
    assert last.startswith("stopped ") and last.endswith(f"; continue with: fedpfn resume {out}"), err
    assert wait_until(lambda: not session_processes(proc.pid), 10), "Ray's processes outlived the run"
    assert not (out / ".fedpfn.lock").exists() and not list(out.glob("*.tmp"))
    done = RunFolder(out).read_metrics()
    assert [r["round"] for r in done] == list(range(1, len(done) + 1)) and not any(r["skipped"] for r in done)


STOPPABLE = """
import subprocess, sys, time
from fedpfn.runtime.runfolder import RunFolder
from fedpfn.runtime.simulation import stop_on_signals
with stop_on_signals(RunFolder(sys.argv[1])):
    helper = subprocess.Popen(["sh", "-c", "sleep 300 & wait"])  # a helper with a child of its own
    time.sleep(1.5)  # the watcher looks twice a second
    print(helper.pid, flush=True)
    time.sleep(300)
"""


@pytest.mark.parametrize("how", [signal.SIGKILL, signal.SIGTERM], ids=["kill -9", "SIGTERM before the claim"])
def test_the_processes_a_run_started_stop_with_it(tmp_path, how):
    """Ray's agents outlived a kill -9 by about 75 s; the watcher stops what the run started."""
    proc = subprocess.Popen([sys.executable, "-c", STOPPABLE, str(tmp_path / "run")], cwd=ROOT, env=ENV,
                            start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    helper = int(proc.stdout.readline())
    helpers = [p for p in session_processes(proc.pid) if p not in (proc.pid,)]
    assert helper in helpers and len(helpers) >= 3  # the watcher, sh and its sleep
    proc.send_signal(how)
    _, err = proc.communicate(timeout=20)
    if how == signal.SIGTERM:
        assert proc.returncode == 143, err
        assert err.strip() == f"stopped before the run started; nothing was written to {tmp_path / 'run'}"
    assert wait_until(lambda: not session_processes(proc.pid), 10), session_processes(proc.pid)
    assert not (tmp_path / "run").exists()


def fill_disk(mount: Path) -> None:
    """Fill the file system at `mount` to the last byte, with a real file."""
    fd = os.open(mount / "filler", os.O_WRONLY | os.O_CREAT)
    for chunk in (1 << 20, 1 << 12, 1):
        try:
            while True:
                os.write(fd, b"\0" * chunk)
        except OSError as err:
            assert err.errno == errno.ENOSPC
    os.close(fd)


@pytest.fixture
def small_disk(tmp_path):
    """A 16 MB tmpfs (we run as root in the test machines); skipped where it cannot be mounted."""
    mount = tmp_path / "disk"
    mount.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(mount)], capture_output=True,
                             check=False)  # fmt: skip
    if mounted.returncode != 0:
        pytest.skip("cannot mount a tmpfs here: test_a_failed_write_is_injected covers the path")
    yield mount
    subprocess.run(["umount", "-l", str(mount)], check=False)


class After:
    """A tracking sink that does `action` once round `number` is recorded (before the next round)."""

    def __init__(self, number: int, action) -> None:
        self.number, self.action = number, action

    def round_done(self, record, client_rows) -> None:
        if record["round"] == self.number:
            self.action()

    def close(self, summary=None) -> None:
        pass


def run_in_process(cfg, resume: bool = False, sink=None) -> None:
    """The run's rounds on the batched engine in this process, with an extra tracking sink."""
    from fedpfn.runtime import lifecycle
    from fedpfn.runtime.client_app import client_app
    from fedpfn.runtime.engines import batched

    run = lifecycle.plan(cfg, resume)
    with lifecycle.claimed(run, "batched"), lifecycle.tracking(run, "test", show=False) as tracker:
        tracker.sinks += [sink] if sink else []
        batched.run(run, tracker, client_app)


def stable_rows(path: Path) -> list[dict]:
    return [{k: v for k, v in row.items() if k != "seconds"} for row in RunFolder(path).read_metrics()]


def read_only(folder: Path) -> None:
    """`folder` made read-only from now on (a bind mount of itself; files open already stay writable)."""
    subprocess.run(["mount", "--bind", str(folder), str(folder)], check=True)
    subprocess.run(["mount", "-o", "remount,bind,ro", str(folder)], check=True)


WRITE_TEST = {"rounds": 2, "engine": "batched", "engine_mode": "loop", "checkpoint_every": 1}


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory) -> Path:
    """The numbers every interrupted run below must end with."""
    cfg = tiny_config(out=str(tmp_path_factory.mktemp("reference") / "run"), **WRITE_TEST)
    run_in_process(cfg)
    return cfg.run_dir


@pytest.mark.parametrize("fault", ["disk full", "read-only"])
def test_a_failed_write_mid_run_ends_in_one_line_and_resumes_exactly(small_disk, uninterrupted, fault):
    cfg = tiny_config(out=str(small_disk / "run"), **WRITE_TEST)
    action = (lambda: fill_disk(small_disk)) if fault == "disk full" else (lambda: read_only(cfg.run_dir))
    with pytest.raises(RunWriteError) as stopped:
        run_in_process(cfg, sink=After(1, action))
    message = str(stopped.value)
    assert "\n" not in message and message.startswith(f"cannot write {cfg.run_dir}/"), message
    assert message.endswith(f"stopped after round 1; continue with: fedpfn resume {cfg.run_dir}")
    if fault == "disk full":
        (small_disk / "filler").unlink()
    else:
        subprocess.run(["umount", str(cfg.run_dir)], check=True)
    assert not list(cfg.run_dir.glob("*.tmp"))
    assert len(RunFolder(cfg.run_dir).read_metrics()) == RunFolder(cfg.run_dir).checkpoint_round() == 1
    run_in_process(cfg, resume=True)
    assert stable_rows(cfg.run_dir) == stable_rows(uninterrupted)


def test_a_failed_write_is_injected_where_no_tmpfs_can_be_mounted(tmp_path, monkeypatch):
    """The same path without a mount: the checkpoint's write fails as a full disk makes it fail."""
    from fedpfn.core import files

    cfg = tiny_config(out=str(tmp_path / "run"), rounds=2, engine="batched", engine_mode="loop")

    def full(path: Path) -> int:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))

    with pytest.raises(RunWriteError) as stopped:
        run_in_process(cfg, sink=After(1, lambda: monkeypatch.setattr(files, "_open_new", full)))
    assert str(stopped.value).startswith(f"cannot write {cfg.run_dir / 'checkpoint.npz'} (No space left on device)")
    assert not list(cfg.run_dir.glob("*.tmp")) and len(RunFolder(cfg.run_dir).read_metrics()) == 1


# --- bad input: one line, exit 2, before anything starts -----------------------------------------

PRESETS = [
    ('rounds = "5"\n', "rounds: '5' is not an integer (the preset quotes it: write rounds = 5 without quotes)"),
    ('download = "yes"\n', "download: 'yes' is not true or false (the preset quotes it"),
    ('lr = "0.1"\n', "lr: '0.1' is not a finite number (the preset quotes it"),
    ("num-clients = 4\nnum_clients = 8\n", "sets num_clients twice ('num-clients' and 'num_clients')"),
    ("rounds = 99999999999999999999\n", "rounds: 99999999999999999999 is out of range"),
]


@pytest.mark.parametrize("text,message", PRESETS, ids=[t.split("=")[0].strip() for t, _ in PRESETS])
def test_a_preset_value_must_be_what_it_claims(tmp_path, capsys, monkeypatch, text, message):
    lines = refused(capsys, monkeypatch, "--config", toml(tmp_path, text), "--out", str(tmp_path / "r"))
    assert any(message in line for line in lines), lines


FLAGS = [
    (["--rounds", "٣"], "rounds: '٣' is not an integer"),
    (["--lr", "０.１"], "lr: '０.１' is not a finite number"),
    (["--num-clients", "1_000"], "num_clients: '1_000' is not an integer"),
    (["--batch-size", "99999999999999999999999"], "batch_size: 99999999999999999999999 is out of range"),
    (["--client-cpus", "1e-300"], "client_cpus: 1e-300 is below Ray's smallest share of a resource (0.0001)"),
    (["--config", "/dev/zero"], "config: '/dev/zero' is not a regular file"),
    (["--out", "/tmp/" + "x" * 300], "cannot be used (File name too long)"),
]


@pytest.mark.parametrize("args,message", FLAGS, ids=[" ".join(a)[:30] for a, _ in FLAGS])
def test_a_flag_value_must_be_what_it_claims(tmp_path, capsys, monkeypatch, args, message):
    out = [] if "--out" in args else ["--out", str(tmp_path / "r")]
    lines = refused(capsys, monkeypatch, "--engine", "ray", *args, *out)
    assert len(lines) == 1 and message in lines[0], lines


def test_presets_that_are_not_small_regular_files(tmp_path, capsys, monkeypatch):
    fifo = tmp_path / "fifo.toml"
    os.mkfifo(fifo)
    huge = toml(tmp_path, "# x\n" * 400_000, "huge.toml")
    for path, message in ((str(fifo), "is not a regular file"), (huge, "is larger than 1048576 bytes")):
        lines = refused(capsys, monkeypatch, "--config", path, "--out", str(tmp_path / "r"))
        assert len(lines) == 1 and message in lines[0], lines


def test_resume_refuses_an_empty_folder_name(tmp_path, monkeypatch):
    from fedpfn.runtime.simulation import resume_config

    with pytest.raises(ConfigError, match="resume: no folder given"):
        resume_config("", {})
    folder = resumable_run(tmp_path / "run")  # and a sound run passes every check
    assert passes_checks(monkeypatch, "--resume", str(folder.path))


CHECKPOINTS = [
    ({"round": -1}, "its round is -1, not a whole number >= 1"),
    ({"round": 1.5}, "its round is 1.5"),
    ({"round": "2"}, "its round is '2'"),
    ({"elapsed_seconds": float("inf")}, "its elapsed_seconds is inf"),
    ({"model": {"w": np.array(["text"])}}, "its model entry 'w' is not a numeric array"),
]


@pytest.mark.parametrize("changes,message", CHECKPOINTS, ids=[m[:24] for _, m in CHECKPOINTS])
def test_a_checkpoint_that_cannot_be_resumed_is_refused_before_anything_is_written(
    tmp_path, capsys, monkeypatch, changes, message
):
    folder = resumable_run(tmp_path / "run", **changes)
    before = snapshot(folder.path)
    lines = refused(capsys, monkeypatch, "--resume", str(folder.path))
    assert any(f"checkpoint.npz is damaged ({message}" in line for line in lines), lines
    assert snapshot(folder.path) == before


def test_a_checkpoint_of_another_model_shape_or_dtype_is_refused(tmp_path, capsys, monkeypatch):
    folder = resumable_run(tmp_path / "run")
    tree = {"round": 1, "elapsed_seconds": 1.0, "strategy": {}}
    model = read_tree(folder.path / "checkpoint.npz")["model"]
    name = min(model)
    for wrong in (np.zeros((3, 3), np.float32), model[name].astype(np.float64)):
        fingerprint = tiny_config(out=str(folder.path)).fingerprint()
        folder.save_checkpoint(fingerprint, {**tree, "model": {**model, name: wrong}})
        lines = refused(capsys, monkeypatch, "--resume", str(folder.path))
        assert any(f"its entry '{name}' is ({wrong.shape}, '{wrong.dtype}')" in line for line in lines), lines


def test_an_array_claiming_more_than_its_file_holds_is_never_allocated(tmp_path, capsys, monkeypatch):
    folder = resumable_run(tmp_path / "run")
    path = folder.path / "checkpoint.npz"
    with zipfile.ZipFile(path) as archive:
        members = {name: archive.read(name) for name in archive.namelist()}
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(header, {"descr": "<f4", "fortran_order": False, "shape": (2**40,)})
    members["a0.npy"] = header.getvalue() + bytes(16)  # 4 TiB asked for by a few bytes
    with zipfile.ZipFile(path, "w") as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    lines = refused(capsys, monkeypatch, "--resume", str(folder.path))
    assert any("checkpoint.npz is damaged (ValueError)" in line for line in lines), lines


TAMPERED_ROWS = [
    ({"skipped": "no"}, "line 1: 'skipped' is 'no'"),
    ({"clients": "0,1"}, "line 1: 'clients' is '0,1'"),
    ({"bytes_up": None}, "line 1: 'bytes_up' is None"),
    ({"test_accuracy": "high"}, "line 1: 'test_accuracy' is 'high'"),
]


@pytest.mark.parametrize("change,message", TAMPERED_ROWS, ids=[m.split("'")[1] for _, m in TAMPERED_ROWS])
def test_tampered_metrics_rows_are_refused_in_one_line(tmp_path, capsys, monkeypatch, change, message):
    folder = resumable_run(tmp_path / "run")
    (folder.path / "metrics.jsonl").write_text(json.dumps({**metrics_row(1), **change}) + "\n")
    lines = refused(capsys, monkeypatch, "--resume", str(folder.path))
    assert lines == [f"error: {folder.path / 'metrics.jsonl'} is damaged: {message}"]


def test_tampered_client_rows_are_refused_before_the_folder_is_touched(tmp_path, capsys, monkeypatch):
    folder = resumable_run(tmp_path / "run")
    (folder.path / "clients.jsonl").write_text('{"round": "1", "partition_id": 0}\n')
    before = snapshot(folder.path)
    lines = refused(capsys, monkeypatch, "--resume", str(folder.path))
    assert lines == [f"error: {folder.path / 'clients.jsonl'} is damaged: line 1 has no whole-number round"]
    assert snapshot(folder.path) == before


def test_a_deeply_nested_or_huge_config_is_refused_before_it_is_parsed(tmp_path, capsys, monkeypatch):
    folder = resumable_run(tmp_path / "run")
    (folder.path / "config.json").write_text('{"a": ' + "[" * 100_000 + "]" * 100_000 + "}")
    lines = refused(capsys, monkeypatch, "--resume", str(folder.path))
    assert any("config.json nests deeper than 64 levels" in line for line in lines), lines
    (folder.path / "config.json").unlink()
    os.mkfifo(folder.path / "config.json")
    lines = refused(capsys, monkeypatch, "--resume", str(folder.path))
    assert any("holds entries that are not regular files (config.json)" in line for line in lines), lines


def test_a_gzip_bomb_and_an_absurd_cifar_array_are_refused_before_they_are_read(tmp_path):
    from tests.support.idx import write_idx_set

    write_idx_set(tmp_path)
    bomb = tmp_path / "train-images-idx3-ubyte.gz"
    header = (0x803).to_bytes(4, "big") + np.asarray([4, 28, 28], dtype=">u4").tobytes()
    with gzip.open(bomb, "wb") as fh:  # 3 KB of images the header asks for, then 64 MB more
        fh.write(header + bytes(4 * 28 * 28))
        for _ in range(64):
            fh.write(bytes(1 << 20))
    (tmp_path / "train-images-idx3-ubyte").unlink()
    with pytest.raises(DataError, match="payload is more than 3136 bytes"):
        load_dataset("fmnist", str(tmp_path))
    batch = tmp_path / "data_batch_1"  # _reconstruct(ndarray, (2**40,), b'b'): 1 TiB asked for by 60 bytes
    batch.write_bytes(b"\x80\x02cnumpy.core.multiarray\n_reconstruct\nq\x00cnumpy\nndarray\nq\x01"
                      b"\x8a\x06\x00\x00\x00\x00\x00\x01\x85C\x01b\x87R.")  # fmt: skip
    from fedpfn.core.data import _read_cifar_batch

    with pytest.raises(DataError, match="asks for an array of shape \\(1099511627776,\\), larger than the file"):
        _read_cifar_batch(batch, "labels")
    genuine = tmp_path / "genuine"  # numpy's own pickles (protocol 2, as the official files) still load
    genuine.write_bytes(pickle.dumps({"data": np.ones((2, 3072), np.uint8), "labels": [0, 1]}, protocol=2))
    assert _read_cifar_batch(genuine, "labels")[0].shape == (2, 3, 32, 32)


def test_export_partition_reads_a_run_config_and_refuses_a_stray_word(tmp_path):
    from fedpfn.cli import partition as export

    folder = resumable_run(tmp_path / "run")
    script = ROOT / "scripts" / "export_partition.py"
    cfg = export.run_config(folder.path / "config.json", ["seed=1"])  # its provenance is no setting
    assert cfg.seed == 1 and cfg.federation.num_clients == 4
    result = subprocess.run([sys.executable, str(script), "--config", str(folder.path / "config.json"),
                             "--run-config", "num-clients", "--to", f"0={tmp_path / 'part'}"],
                            capture_output=True, text=True, env=ENV, timeout=120, check=False)  # fmt: skip
    assert result.returncode == 2 and not (tmp_path / "part").exists()
    assert result.stderr.splitlines() == [
        "export_partition.py: --run-config: 'num-clients' is not KEY=VALUE (e.g. 'num-clients=10 seed=1')"
    ]


def test_make_certs_keys_are_the_owners_alone_even_when_forced(tmp_path):
    out = tmp_path / "certs"
    run = ["bash", str(ROOT / "scripts" / "make_certs.sh"), str(out)]
    subprocess.run(["sh", "-c", 'umask 022 && exec "$@"', "sh", *run], check=True, capture_output=True)
    for key in ("ca.key", "server.key"):
        (out / key).chmod(0o644)
    subprocess.run(["sh", "-c", 'umask 022 && exec "$@"', "sh", *run, "--force"], check=True, capture_output=True)
    modes = {p.name: oct(p.stat().st_mode & 0o777) for p in [out, *out.iterdir()]}
    assert modes == {"certs": "0o700", "ca.key": "0o600", "server.key": "0o600", "ca.crt": "0o644",
                     "server.pem": "0o644"}  # fmt: skip
