"""A start is provenance, and checked, in every command that takes one (`fedpfn run --init`,
`fedpfn soup --start`; ColD's study starts its runs with --init, checked before any runs:
tests/studies/test_fusion_studies.py): the header names it with its sha256 and its round-0
accuracy, config.json and the checkpoint record the sha256, a resume refuses a file that changed,
the head is taken or re-seeded as `--fresh-head` says, and a file of no weights is refused in one
line, exit 2, before any output is written."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from fedpfn.cli.main import main
from fedpfn.core.cache import dataset_for, initial_model
from fedpfn.core.init_file import read_state_file, storage_budget
from fedpfn.core.models import build_model
from fedpfn.core.settings import ConfigError
from fedpfn.core.training import evaluate
from fedpfn.experiments import pretrain, soup
from fedpfn.runtime.algorithms import parse_config, validated
from fedpfn.runtime.runfolder import RunFolder
from tests.support.config import tiny_config

TINY = ["--dataset", "fmnist", "--model", "mlp", "--num-clients", "4", "--clients-per-round", "2",
        "--partition", "iid", "--batch-size", "64", "--lr", "0.05", "--seed", "0"]  # fmt: skip
pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _errors(capsys) -> list[str]:
    return capsys.readouterr().err.splitlines()


def test_a_run_names_its_start_records_its_sha256_and_resumes_only_from_that_file(tmp_path: Path, capsys) -> None:
    source = initial_model(tiny_config(seed=4))
    start = tmp_path / "start.safetensors"
    save_file(source.state_dict(), start)
    digest = hashlib.sha256(start.read_bytes()).hexdigest()
    out = tmp_path / "run"
    assert main(["run", *TINY, "--rounds", "1", "--init", str(start), "--fresh-head", "--out", str(out)]) == 0
    config = json.loads((out / "config.json").read_text())
    assert (config["init"], config["init_sha256"], config["fresh_head"]) == (str(start), digest, True)
    assert RunFolder(out).saved_fingerprint()["init_sha256"] == digest  # a checkpoint is tied to the file
    first = read_state_file(out / "model_round_0.pt", storage_budget(source))
    seeded = initial_model(tiny_config()).state_dict()  # the run's seed, without a start
    assert all(torch.equal(first[n], v) for n, v in source.state_dict().items() if n.startswith("features"))
    assert all(torch.equal(first[n], v) for n, v in seeded.items() if n.startswith("classifier"))
    data, model = dataset_for(tiny_config()), initial_model(tiny_config())
    model.load_state_dict(first)
    loss, accuracy = evaluate(model, data.test_x, data.test_y)
    header = f"  start      {start} (sha256 {digest}), classifier from the seed (--fresh-head); round 0: test acc"
    assert f"{header} {100 * accuracy:.2f} %, loss {loss:.4f}" in (out / "run.log").read_text()

    save_file(initial_model(tiny_config(seed=5)).state_dict(), start)  # the same path, another start
    capsys.readouterr()
    assert main(["resume", str(out), "--rounds", "2"]) == 2
    lines = _errors(capsys)
    assert len(lines) == 1 and f"init: '{start}' changed since its sha256 was recorded" in lines[0], lines
    assert json.loads((out / "metrics.jsonl").read_text().splitlines()[-1])["round"] == 1  # untouched
    save_file(source.state_dict(), start)  # the start it began from: it resumes
    assert main(["resume", str(out), "--rounds", "2"]) == 0
    assert f"start      {start} (sha256 {digest}), classifier from the seed" in (out / "run.log").read_text()


def _checked(**values) -> None:
    validated(parse_config(values, set(values)), set(values))


def test_the_start_settings_are_refused_in_one_line_each(tmp_path: Path) -> None:
    start = tmp_path / "start.safetensors"
    save_file(initial_model(tiny_config()).state_dict(), start)
    digest = hashlib.sha256(start.read_bytes()).hexdigest()
    _checked(model="mlp", init=str(start), init_sha256=digest, fresh_head="true")
    for values, says in [
        ({"init": ""}, "init: an empty path; give a start file (.safetensors, or a tensors-only .pt/.pth), "
                       "or leave --init out"),  # fmt: skip
        ({"init": str(start), "init_sha256": "0" * 64}, f"init: '{start}' changed since its sha256 was recorded"),
        ({"init": str(start), "init_sha256": digest.upper()}, "init_sha256: '"),
        ({"init_sha256": digest}, f"init_sha256: {digest} is set, but only --init uses it"),
        ({"fresh_head": "false"}, "fresh_head: False is set, but only --init uses it"),
    ]:
        with pytest.raises(ConfigError) as err:
            _checked(model="mlp", **values)
        lines = str(err.value).splitlines()
        assert len(lines) == 1 and lines[0].startswith(says), lines


def test_an_empty_init_is_refused_by_the_command_before_anything_starts(tmp_path: Path, capsys) -> None:
    assert main(["run", "--init", "", "--out", str(tmp_path / "run")]) == 2
    assert _errors(capsys) == ["error: init: an empty path; give a start file (.safetensors, or a tensors-only "
                               ".pt/.pth), or leave --init out"]  # fmt: skip
    assert not (tmp_path / "run").exists()


def _bad_starts(folder: Path) -> dict[str, Path]:
    """A start of NaN, and bytes that are no checkpoint, each named as a start may be."""
    torch.manual_seed(0)
    state = build_model("mlp", (1, 28, 28), 10, width=8).state_dict()
    files = {"nan": folder / "nan.safetensors", "noise": folder / "noise.pt", "meta": folder / "meta.pt"}
    save_file({k: torch.full_like(v, float("nan")) for k, v in state.items()}, files["nan"])
    files["noise"].write_bytes(os.urandom(2048))
    torch.save({k: v.to("meta") for k, v in state.items()}, files["meta"])
    return files


COMMANDS = {
    "run": lambda start, out: main(["run", *TINY, "--rounds", "1", "--init", str(start), "--out", str(out)]),
    "soup": lambda start, out: soup.main(["--start", str(start), "--model", "mlp", "--out", str(out)]),
}
SAYS = {"nan": "holds NaN or infinity", "noise": "is not a torch file", "meta": "meta tensors"}


@pytest.mark.parametrize("command", list(COMMANDS))
def test_every_command_refuses_a_start_of_no_weights_in_one_line(command: str, tmp_path: Path, capsys) -> None:
    for kind, start in _bad_starts(tmp_path).items():
        out = tmp_path / f"{command}-{kind}"
        capsys.readouterr()
        assert COMMANDS[command](start, out) == 2, kind
        lines = _errors(capsys)
        assert len(lines) == 1 and SAYS[kind] in lines[0] and lines[0].startswith("error: "), (kind, lines)
        assert not out.exists(), kind


def test_a_pretrain_record_beside_a_start_is_read_with_a_size_limit(tmp_path: Path) -> None:
    start = tmp_path / "model.safetensors"
    record = {"config": {"model": "mlp"}, "padding": "x" * (pretrain.MAX_RECORD_BYTES + 1)}
    (tmp_path / pretrain.RECORD_FILE).write_text(json.dumps(record))
    cfg, lines = pretrain.read_record(start)  # read whole before, and taken
    assert cfg is None and len(lines) == 1 and f"larger than {pretrain.MAX_RECORD_BYTES} bytes" in lines[0], lines
    (tmp_path / pretrain.RECORD_FILE).unlink()
    os.mkfifo(tmp_path / pretrain.RECORD_FILE)
    cfg, lines = pretrain.read_record(start)  # passed over in silence before
    assert cfg is None and len(lines) == 1 and "not a regular file" in lines[0], lines
