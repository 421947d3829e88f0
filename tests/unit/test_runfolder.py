"""The run folder contract: nothing lost, nothing foreign touched, nothing unpickled, nothing stale."""

from __future__ import annotations

import io
import json
import os
import pickle
import shlex
import zipfile

import numpy as np
import pytest
import torch

from fedpfn.core.files import CHECKPOINT, METRICS, json_text
from fedpfn.runtime.runfolder import RunFolder, RunFolderError, is_own, read_tree, tree_bytes

FINGERPRINT = {"algorithm": "fedavg", "lr": 0.05, "seed": 0}


def snapshot(path) -> dict[str, bytes]:
    return {str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()}


def row(number: int, **extra) -> dict:
    """A metrics row with the keys a resume reads back, as the server loop writes them."""
    return {"round": number, "clients": [0, 1], "failed_partitions": [], "missing_partitions": [],
            "skipped": False, "num_failures": 0, "bytes_up": 10, "bytes_down": 10, **extra}


def started(tmp_path, name="run") -> RunFolder:
    folder = RunFolder(tmp_path / name)
    with folder.exclusive():
        folder.start({"algorithm": "fedavg"}, overwrite=False)
    return folder


def test_a_folder_with_foreign_files_is_refused_even_with_overwrite(tmp_path):
    (tmp_path / "notes.txt").write_text("my thesis")
    (tmp_path / "config.json").write_text("{}")
    before = snapshot(tmp_path)
    for overwrite in (False, True):
        with pytest.raises(RunFolderError, match=r"holds files fedpfn did not write \(notes.txt\)"):
            RunFolder(tmp_path).check_new_run(overwrite)
    assert snapshot(tmp_path) == before


def test_overwrite_replaces_only_the_tools_own_files(tmp_path):
    folder = started(tmp_path)
    folder.append_metrics({"round": 1, "test_accuracy": 0.5})
    (folder.path / "model_round_0.pt").write_bytes(b"x")
    (folder.path / "client_state" / "0").mkdir(parents=True)
    with pytest.raises(RunFolderError, match="holds an unfinished run; pass --overwrite") as refused:
        folder.check_new_run(overwrite=False)
    assert str(refused.value).endswith(f"or continue it with fedpfn resume {shlex.quote(str(folder.path))}")
    with folder.exclusive():
        folder.start({"algorithm": "fedprox"}, overwrite=True)
    assert sorted(p.name for p in folder.path.iterdir()) == ["config.json"]
    assert folder.read_config() == {"algorithm": "fedprox"}


def test_refused_claim_leaves_no_folder_behind(tmp_path):
    folder = RunFolder(tmp_path / "new")
    with pytest.raises(RunFolderError):
        with folder.exclusive():
            raise RunFolderError("refused after the lock")
    assert not (tmp_path / "new").exists()


def test_out_that_is_a_file_or_not_writable_is_refused(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(RunFolderError, match="is a file; give a folder"):
        RunFolder(tmp_path / "file").check_usable()
    with pytest.raises(RunFolderError, match="cannot be written"):
        RunFolder(tmp_path / "file" / "run").check_usable()  # under a file: never creatable
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        if os.access(locked, os.W_OK):  # root ignores permissions
            pytest.skip("running as root: permissions are not enforced")
        with pytest.raises(RunFolderError, match="cannot be written"):
            RunFolder(locked / "run").check_usable()
    finally:
        locked.chmod(0o700)


def test_a_busy_folder_is_refused_and_the_lock_goes_when_done(tmp_path):
    folder = started(tmp_path)
    with folder.exclusive():
        with pytest.raises(RunFolderError, match="in use by another running process"):
            with RunFolder(folder.path).exclusive():
                pass
    assert not (folder.path / ".fedpfn.lock").exists()


def test_metrics_are_strict_json(tmp_path):
    folder = started(tmp_path)
    folder.append_metrics({"round": 1, "train_loss": float("nan"), "test_loss": float("inf")})
    line = (folder.path / METRICS).read_text().strip()
    assert json.loads(line) == {"round": 1, "train_loss": None, "test_loss": None}
    assert "NaN" not in line and "Infinity" not in line
    with pytest.raises(ValueError):
        json.dumps(float("nan"), allow_nan=False)  # the guard json_text relies on
    assert json_text({"a": [float("nan")]}) == '{"a": [null]}'


def test_a_line_cut_by_a_kill_is_dropped_other_damage_refused(tmp_path):
    folder = started(tmp_path)
    folder.append_metrics(row(1))
    folder.append_metrics(row(2))
    with open(folder.path / METRICS, "a") as fh:
        fh.write('{"round": 3, "test_acc')  # cut mid-write: round 3 never finished
    assert [r["round"] for r in folder.read_metrics()] == [1, 2]
    text = (folder.path / METRICS).read_text().replace('{"bytes_down"', "{garbage", 1)
    (folder.path / METRICS).write_text(text)
    with pytest.raises(RunFolderError, match="damaged at line 1"):
        folder.read_metrics()
    (folder.path / METRICS).write_text(json_text(row(1)) + "\n" + json_text(row(1)) + "\n")
    with pytest.raises(RunFolderError, match="line 2 holds round 1, expected 2"):
        folder.read_metrics()


def test_keep_metrics_refuses_a_checkpoint_the_metrics_do_not_cover(tmp_path):
    folder = started(tmp_path)
    folder.append_metrics(row(1))
    with pytest.raises(RunFolderError, match="holds rounds 1..1 but the checkpoint covers 1..3"):
        folder.keep_metrics_up_to(3)
    folder.keep_metrics_up_to(0)
    assert folder.read_metrics() == []


def test_checkpoint_round_trip_keeps_dtypes_and_0d_arrays(tmp_path):
    folder = started(tmp_path)
    tree = {
        "round": 3,
        "elapsed_seconds": 1.5,
        "model": {"w": np.arange(6, dtype=np.float32).reshape(2, 3), "count": np.array(7, dtype=np.int64)},
        "strategy": {"inner": {"attributes": {"momentum_vector": [np.ones(2)], "lr": 0.1, "note": None}}},
    }
    folder.save_checkpoint(FINGERPRINT, tree)
    loaded = folder.load_checkpoint(FINGERPRINT)
    assert loaded["round"] == 3
    assert loaded["model"]["count"].shape == () and loaded["model"]["count"].dtype == np.int64
    assert loaded["model"]["w"].dtype == np.float32 and np.array_equal(loaded["model"]["w"], tree["model"]["w"])
    assert loaded["strategy"]["inner"]["attributes"]["lr"] == 0.1
    assert not list(folder.path.glob("*.tmp"))


def test_a_checkpoint_of_other_settings_is_refused(tmp_path):
    folder = started(tmp_path)
    folder.save_checkpoint(FINGERPRINT, {"round": 1})
    with pytest.raises(RunFolderError, match=r"belongs to other settings \(lr: 0.05 -> 0.1\)"):
        folder.load_checkpoint({**FINGERPRINT, "lr": 0.1})


class _Boom:
    def __reduce__(self):
        return (os.system, ("touch /tmp/fedpfn-pwned",))


def test_a_crafted_pickle_is_never_executed(tmp_path):
    folder = started(tmp_path)
    marker = "/tmp/fedpfn-pwned"
    if os.path.exists(marker):
        os.remove(marker)
    buffer = io.BytesIO()
    np.savez(buffer, __tree__=np.frombuffer(b'{"round": {"__array__": "a0"}}', dtype=np.uint8),
             a0=np.array([_Boom()], dtype=object))
    (folder.path / CHECKPOINT).write_bytes(buffer.getvalue())
    with pytest.raises(RunFolderError, match="is damaged"):
        folder.load_checkpoint(FINGERPRINT)
    (folder.path / CHECKPOINT).write_bytes(pickle.dumps(_Boom()))  # the old format, crafted
    with pytest.raises(RunFolderError, match="is damaged"):
        folder.load_checkpoint(FINGERPRINT)
    assert not os.path.exists(marker)


def test_tree_serialisation_refuses_objects(tmp_path):
    with pytest.raises(TypeError, match="arrays and plain values only"):
        tree_bytes({"model": torch.nn.Linear(2, 2)})
    path = tmp_path / "t.npz"
    path.write_bytes(tree_bytes({"a": [1, "x", None, np.zeros(0)]}))
    assert read_tree(path)["a"][:3] == [1, "x", None]
    with zipfile.ZipFile(path) as archive:
        assert all(name.endswith(".npy") for name in archive.namelist())


def test_own_file_names():
    for name in ("config.json", "metrics.jsonl", "model_round_12.pt", "client_state", "checkpoint.npz.tmp"):
        assert is_own(name), name
    for name in ("notes.txt", "data", "model.pt", "checkpoint.pt"):
        assert not is_own(name), name
