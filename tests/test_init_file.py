"""A start read from a file (`--init`): tensors only, every mismatch one line, a new task's head seeded."""

from __future__ import annotations

import collections
import os
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from fedpfn.core.config import RunConfig
from fedpfn.core.init_file import InitError, init_file_problem, load_start
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


def test_another_class_count_keeps_the_seeded_head_and_says_so(tmp_path: Path) -> None:
    save_file(mlp(classes=1000, seed=1).state_dict(), tmp_path / "imagenet.safetensors")
    target, fresh = mlp(seed=2), mlp(seed=2)
    notes = load_start(target, tmp_path / "imagenet.safetensors")
    assert len(notes) == 1 and "classifier" in notes[0] and "class count differs" in notes[0]
    assert same(target, mlp(classes=1000, seed=1), skip="classifier")
    assert torch.equal(target.classifier.weight, fresh.classifier.weight)  # the seed's, untouched


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
    problems = RunConfig(init=str(tmp_path / "none.pt")).problems()
    assert [p for p in problems if p.startswith("init:")] == [
        f"init: '{tmp_path / 'none.pt'}' does not exist"
    ]
    assert RunConfig(init=None).problems() == RunConfig().problems()


def test_a_run_starts_from_the_file_and_refuses_one_that_does_not_fit(tmp_path: Path) -> None:
    from fedpfn.core.cache import initial_model

    cfg = RunConfig(model="mlp", seed=3)
    source = initial_model(RunConfig(model="mlp", seed=4))
    save_file(source.state_dict(), tmp_path / "start.safetensors")
    started = initial_model(RunConfig(model="mlp", seed=3, init=str(tmp_path / "start.safetensors")))
    assert same(started, source) and not same(initial_model(cfg), source)
    save_file(mlp().state_dict(), tmp_path / "small.safetensors")  # width 8, not the run's 200
    with pytest.raises(InitError) as err:
        initial_model(RunConfig(model="mlp", init=str(tmp_path / "small.safetensors")))
    assert all(
        line.startswith(f"init: {tmp_path / 'small.safetensors'}: shape of")
        for line in str(err.value).splitlines()
    )
