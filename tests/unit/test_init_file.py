"""A start read from a file (`--init`, `--start`): tensors only, dense, numeric and finite, bounded by the
model before anything is allocated; every mismatch one line; the head taken, or re-seeded by fresh_head."""

from __future__ import annotations

import collections
import hashlib
import os
import random
import tracemalloc
import warnings
import zipfile
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from fedpfn.core.concerns import Task
from fedpfn.core.config import RunConfig
from fedpfn.core.groups import Seeded, Start
from fedpfn.core.init_file import CHUNK_BYTES, MARGIN_BYTES, InitError, file_sha256, init_file_problem, load_start
from fedpfn.core.models import TimmViT, build_model

SHAPE = (1, 28, 28)


def mlp(classes: int = 10, seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    return build_model("mlp", SHAPE, classes, width=8)


def same(a: torch.nn.Module, b: torch.nn.Module, skip: str = "") -> bool:
    sa, sb = a.state_dict(), b.state_dict()
    return all(torch.equal(sa[k], sb[k]) for k in sa if not (skip and k.startswith(skip)))


def test_a_start_loads_from_safetensors_and_from_a_tensors_only_pt(tmp_path: Path) -> None:
    source = mlp(seed=1)
    save_file(source.state_dict(), tmp_path / "start.safetensors")
    torch.save(source.state_dict(), tmp_path / "start.pt")
    torch.save({"state_dict": source.state_dict()}, tmp_path / "wrapped.pth")
    for name in ("start.safetensors", "start.pt", "wrapped.pth"):
        target = mlp(seed=2)
        assert not same(target, source)
        assert load_start(target, tmp_path / name) == []
        assert same(target, source), name


class Boom:
    """A pickle that would run a command when unpickled."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_a_pickled_object_is_refused_in_one_line_and_never_run(tmp_path: Path) -> None:
    marker, evil = tmp_path / "ran", tmp_path / "evil.pt"
    torch.save({"w": Boom(marker)}, evil)
    with pytest.raises(InitError) as err:
        load_start(mlp(), evil)
    assert len(str(err.value).splitlines()) == 1 and "more than tensors" in str(err.value)
    assert not marker.exists()
    torch.save(collections.Counter(a=1), tmp_path / "counter.pt")  # a plain container of no tensors
    with pytest.raises(InitError, match="not tensors|more than tensors"):
        load_start(mlp(), tmp_path / "counter.pt")


def test_a_wrong_shape_and_a_missing_key_each_get_one_line(tmp_path: Path) -> None:
    state = mlp().state_dict()
    state["features.1.weight"] = torch.zeros(9, 784)  # width 9 against the model's 8
    del state["features.3.bias"]
    save_file(state, tmp_path / "bad.safetensors")
    with pytest.raises(InitError) as err:
        load_start(mlp(), tmp_path / "bad.safetensors")
    lines = str(err.value).splitlines()
    assert len(lines) == 2
    assert "missing 'features.3.bias'" in lines[0]
    assert "shape of 'features.1.weight': the file's (9, 784), the model's (8, 784)" in lines[1]


def test_a_head_of_another_class_count_is_refused_unless_fresh_head_reseeds_it(tmp_path: Path) -> None:
    save_file(mlp(classes=1000, seed=1).state_dict(), tmp_path / "imagenet.safetensors")
    with pytest.raises(InitError) as err:  # taken silently, or re-seeded unasked, before
        load_start(mlp(seed=2), tmp_path / "imagenet.safetensors")
    assert len(str(err.value).splitlines()) == 1
    assert "its classifier has 1000 classes, the model 10: give --fresh-head" in str(err.value)
    target, fresh = mlp(seed=2), mlp(seed=2)
    notes = load_start(target, tmp_path / "imagenet.safetensors", fresh_head=True)
    assert len(notes) == 1 and "classifier" in notes[0] and "--fresh-head" in notes[0]
    assert same(target, mlp(classes=1000, seed=1), skip="classifier")
    assert torch.equal(target.classifier.weight, fresh.classifier.weight)  # the seed's, untouched


def test_a_same_sized_head_is_taken_and_fresh_head_reseeds_it(tmp_path: Path) -> None:
    save_file(mlp(seed=1).state_dict(), tmp_path / "start.safetensors")
    taken, reseeded = mlp(seed=2), mlp(seed=2)
    assert load_start(taken, tmp_path / "start.safetensors") == []
    assert same(taken, mlp(seed=1))
    load_start(reseeded, tmp_path / "start.safetensors", fresh_head=True)
    assert same(reseeded, mlp(seed=1), skip="classifier") and same(reseeded, mlp(seed=2), skip="features")


def test_a_timm_saved_vit_reads_through_its_own_names(tmp_path: Path) -> None:
    torch.manual_seed(0)
    vit = build_model("vit_tiny28", SHAPE, 10)
    timm_names = {k[len("net.") :] if k.startswith("net.") else "head." + k[len("classifier.") :]: v
                  for k, v in vit.state_dict().items()}  # fmt: skip
    assert TimmViT.file_name("head.weight") == "classifier.weight"
    save_file(timm_names, tmp_path / "timm.safetensors")
    torch.manual_seed(1)
    target = build_model("vit_tiny28", SHAPE, 10)
    assert load_start(target, tmp_path / "timm.safetensors") == []
    assert same(target, vit)


def test_the_run_config_checks_the_file_before_anything_starts(tmp_path: Path) -> None:
    assert (
        init_file_problem(str(tmp_path / "none.safetensors"))
        == f"'{tmp_path / 'none.safetensors'}' does not exist"
    )
    assert "must end in" in init_file_problem(str(tmp_path / "weights.npz"))
    problems = RunConfig(start=Start(str(tmp_path / "none.pt"))).problems()
    assert [p for p in problems if p.startswith("init:")] == [
        f"init: '{tmp_path / 'none.pt'}' does not exist"
    ]
    assert RunConfig(start=Seeded()).problems() == RunConfig().problems()


def test_a_run_starts_from_the_file_and_refuses_one_that_does_not_fit(tmp_path: Path) -> None:
    from fedpfn.core.cache import initial_model

    cfg = RunConfig(task=Task(model="mlp"), seed=3)
    source = initial_model(RunConfig(task=Task(model="mlp"), seed=4))
    save_file(source.state_dict(), tmp_path / "start.safetensors")
    started = initial_model(RunConfig(task=Task(model="mlp"), seed=3, start=Start(str(tmp_path / "start.safetensors"))))
    assert same(started, source) and not same(initial_model(cfg), source)
    save_file(mlp().state_dict(), tmp_path / "small.safetensors")  # width 8, not the run's 200
    with pytest.raises(InitError) as err:
        initial_model(RunConfig(task=Task(model="mlp"), start=Start(str(tmp_path / "small.safetensors"))))
    assert all(
        line.startswith(f"init: {tmp_path / 'small.safetensors'}: shape of")
        for line in str(err.value).splitlines()
    )


def _every(state: dict[str, torch.Tensor], change) -> dict[str, torch.Tensor]:
    return {name: change(value) for name, value in state.items()}


REFUSED_FILES = {  # what a start file holds -> what its one line says
    "bool": (lambda t: t.to(torch.bool), "neither floating point nor integer"),
    "int8": (lambda t: t.to(torch.int8), "not floating point where the model's are"),
    "uint8": (lambda t: t.to(torch.uint8), "not floating point where the model's are"),
    "int64": (lambda t: t.to(torch.int64), "not floating point where the model's are"),
    "complex": (lambda t: t.to(torch.complex64), "neither floating point nor integer"),
    "nan": (lambda t: torch.full_like(t, float("nan")), "NaN or infinity in 6 tensor(s)"),
    "inf": (lambda t: t.clone().index_fill_(0, torch.tensor([0]), float("inf")), "NaN or infinity"),
    "meta": (lambda t: t.to("meta"), "meta tensors or on another device"),
    "quantized": (lambda t: torch.quantize_per_tensor(t, 0.1, 0, torch.qint8), "quantized"),
    "sparse": (lambda t: t.to_sparse(), "sparse, nested or of another layout"),
}


@pytest.mark.parametrize("kind", list(REFUSED_FILES))
def test_a_file_of_no_weights_is_refused_in_one_line(kind: str, tmp_path: Path) -> None:
    change, says = REFUSED_FILES[kind]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch deprecates quantized tensors
        torch.save(_every(mlp(seed=1).state_dict(), change), tmp_path / f"{kind}.pt")
    target = mlp(seed=2)
    before = {k: v.clone() for k, v in target.state_dict().items()}
    with pytest.raises(InitError) as err:
        load_start(target, tmp_path / f"{kind}.pt")
    lines = str(err.value).splitlines()
    assert len(lines) == 1 and lines[0].startswith("init: ") and says in lines[0], lines
    assert all(torch.equal(before[k], v) for k, v in target.state_dict().items())  # nothing taken


def test_an_integer_buffer_stays_an_integer_and_half_precision_weights_are_taken(tmp_path: Path) -> None:
    torch.manual_seed(1)
    source = build_model("resnet20", (3, 8, 8), 10)  # BatchNorm's num_batches_tracked is int64
    state = {k: v.half() if v.is_floating_point() else v for k, v in source.state_dict().items()}
    torch.save(state, tmp_path / "half.pt")
    torch.manual_seed(2)
    target = build_model("resnet20", (3, 8, 8), 10)
    assert load_start(target, tmp_path / "half.pt") == []
    assert all(torch.equal(target.state_dict()[k], v.to(target.state_dict()[k].dtype)) for k, v in state.items())


@pytest.mark.parametrize("seed", range(12))
def test_random_bytes_named_pt_or_safetensors_are_no_start(seed: int, tmp_path: Path) -> None:
    data = random.Random(seed).randbytes(4096)
    for name in ("noise.pt", "noise.pth", "noise.safetensors"):
        (tmp_path / name).write_bytes(data)
        with pytest.raises(InitError) as err:
            load_start(mlp(), tmp_path / name)
        assert len(str(err.value).splitlines()) == 1, err.value


def test_a_zip_bomb_is_refused_before_torch_reads_it(tmp_path: Path, monkeypatch) -> None:
    """A .pt whose member inflates to far more than the model could need: its size is read from
    the archive's directory, and torch.load never runs."""
    torch.save(mlp().state_dict(), tmp_path / "honest.pt")
    bomb = tmp_path / "bomb.pt"
    with zipfile.ZipFile(tmp_path / "honest.pt") as honest, zipfile.ZipFile(bomb, "w") as out:
        for member in honest.infolist():
            out.writestr(member, honest.read(member))
        inflating = zipfile.ZipInfo("honest/data/99")
        inflating.compress_type = zipfile.ZIP_DEFLATED
        with out.open(inflating, "w") as fh:
            for _ in range(MARGIN_BYTES // (1 << 20) + 8):
                fh.write(bytes(1 << 20))
    assert bomb.stat().st_size < 1 << 20  # a small file
    monkeypatch.setattr(torch, "load", lambda *a, **k: pytest.fail("torch.load read the bomb"))
    with pytest.raises(InitError) as err:
        load_start(mlp(), bomb)
    lines = str(err.value).splitlines()
    assert len(lines) == 1 and "unpacks to" in lines[0] and "refused unread" in lines[0], lines


def test_a_view_that_repeats_one_value_to_gigabytes_is_refused(tmp_path: Path) -> None:
    """torch.save keeps a stride-0 view as one stored value: small on disk, huge once read."""
    state = mlp().state_dict()
    state["features.1.weight"] = torch.zeros(1).expand(1 << 30)
    torch.save(state, tmp_path / "expanded.pt")
    with pytest.raises(InitError, match="tensors of 4,096.0 MiB in all"):
        load_start(mlp(), tmp_path / "expanded.pt")


def test_a_fifo_and_an_empty_path_are_refused_without_reading(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "pipe.pt")
    assert init_file_problem(str(tmp_path / "pipe.pt")) == f"'{tmp_path / 'pipe.pt'}' is not a regular file"
    assert init_file_problem("") == "an empty path; give a start file (.safetensors, or a tensors-only .pt/.pth)"
    with pytest.raises(InitError, match="not a regular file"):
        file_sha256(tmp_path / "pipe.pt")  # never blocks on the pipe


def test_the_sha256_is_sha256sums_read_a_chunk_at_a_time(tmp_path: Path) -> None:
    data = random.Random(0).randbytes(1 << 20) * 32 + b"tail"
    (tmp_path / "start.safetensors").write_bytes(data)
    expected = hashlib.sha256(data).hexdigest()
    del data
    tracemalloc.start()
    try:
        assert file_sha256(tmp_path / "start.safetensors") == expected
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 4 * CHUNK_BYTES, peak  # a 32 MiB file, never held whole
