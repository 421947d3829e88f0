"""A user's own model and dataset by dotted path (issue 43 item 7): `--model package.module:build`,
`--dataset package.module:load`, the contract checked in one line, the data guide's worked
example (mypkg/stripes.py) run as the page gives it, and a resume given the paths again."""

from __future__ import annotations

import json
import re
import shlex
import sys
from pathlib import Path

import pytest

import run_sim
from fedpfn.core.files import CONFIG, METRICS, read_jsonl
from fedpfn.core.models import TIMM_PREFIX
from fedpfn.core.user_code import NAMES_NOT_CODE, code_paths, is_code
from tests.support.commands import refused
from tests.support.site_commands import fenced_blocks

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "guide" / "data.md"
SECTION = "## A model and a dataset of your own"

BAD_PARTS = '''
import numpy as np
import torch
from torch import nn
from mypkg.stripes import SmallCNN, load

NOT_A_FUNCTION = 3
def plain(shape, classes): return nn.Sequential(nn.Flatten(), nn.Linear(256, classes))
def seven(shape, classes): return SmallCNN(shape, 7)
def raises(shape, classes): raise RuntimeError("no GPU here")
def meta(shape, classes):
    with torch.device("meta"):
        return SmallCNN(shape, classes)
def three(root): return load(root)[:3]
def float_labels(root):
    x, y, tx, ty = load(root)
    return x, y.astype(np.float32), tx, ty
def flat(root):
    x, y, tx, ty = load(root)
    return x.reshape(len(x), -1), y, tx, ty
def nan_images(root):
    x, y, tx, ty = load(root)
    tx[3, 0, 1, 1], tx[4, 0, 0, 0] = np.nan, np.inf
    return x, y, tx, ty
'''


def page_section() -> str:
    text = PAGE.read_text()
    return text[text.index(SECTION) :]


def page_command() -> list[str]:
    """The section's `fedpfn run` command, as its words after `fedpfn run`."""
    bash = [body for language, body in fenced_blocks(page_section()) if language == "bash"]
    words = shlex.split(bash[0])
    assert words[:2] == ["fedpfn", "run"], words
    return words[2:]


def test_the_pages_code_is_the_example_packages():
    """What the page shows is what mypkg/stripes.py holds (the file the command imports)."""
    source = (ROOT / "mypkg" / "stripes.py").read_text()
    shown = [body for language, body in fenced_blocks(page_section()) if language == "python"]
    assert len(shown) == 2 and all(block in source for block in shown)


def test_the_pages_example_runs_and_records_the_paths(tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)  # "from the repository's folder"
    args = page_command()
    out = tmp_path / "stripes"
    args[args.index("--out") + 1] = str(out)
    assert run_sim.main(args) == 0
    saved = json.loads((out / CONFIG).read_text())
    assert (saved["model"], saved["dataset"]) == ("mypkg.stripes:build", "mypkg.stripes:load")
    assert read_jsonl(out / METRICS)[-1]["test_accuracy"] > 0.5  # chance is 1/3


def test_a_resume_is_given_the_paths_again(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(ROOT)
    out = str(tmp_path / "run")
    common = ["--num-clients", "2", "--clients-per-round", "2", "--partition", "iid"]
    assert run_sim.main(["--model", "mypkg.stripes:build", "--dataset", "mypkg.stripes:load", "--rounds", "1",
                         "--out", out, *common]) == 0  # fmt: skip
    assert run_sim.main(["--resume", out, "--rounds", "2"]) == 2
    err = capsys.readouterr().err
    assert "the run's model builder is the class 'mypkg.stripes:build', which only its config.json names" in err
    assert run_sim.main(["--resume", out, "--rounds", "2", "--model", "mypkg.stripes:build",
                         "--dataset", "mypkg.stripes:load"]) == 0  # fmt: skip
    assert [row["round"] for row in read_jsonl(Path(out) / METRICS)] == [1, 2]


@pytest.mark.parametrize(
    "args,message",
    [
        (["--model", "bad_parts:plain"], "model: bad_parts:plain((1, 16, 16), 3) must return a fedpfn.core.models.ZooModel"),
        (["--model", "bad_parts:seven"], "with 3 outputs) mapping float32 (N, *(1, 16, 16)) to (N, 3); it returned SmallCNN"),
        (["--model", "bad_parts:raises"], "model: bad_parts:raises((1, 16, 16), 3) raised RuntimeError: no GPU here"),
        (["--model", "bad_parts:meta"], "to (N, 3); it returned a model on the meta device, which holds no weights to train"),
        (["--model", "bad_parts:NOT_A_FUNCTION"], "model: 'bad_parts:NOT_A_FUNCTION' is not a function"),
        (["--dataset", "bad_parts:three", "--model", "mlp"], "with K >= 2; it returned tuple"),
        (["--dataset", "bad_parts:float_labels", "--model", "mlp"], "its train split has y of torch.float32 (2000,)"),
        (["--dataset", "bad_parts:flat", "--model", "mlp"], "its train split has x of torch.float32 (2000, 256)"),
        (["--dataset", "bad_parts:nan_images", "--model", "mlp"], "its test split has 2 values of x that are NaN or infinite"),
        (["--download"], "download: True is set, but a dataset of your own (--dataset package.module:load) loads"),
    ],
)
def test_what_breaks_the_contract_is_refused_in_one_line(tmp_path, monkeypatch, capsys, args, message):
    (tmp_path / "bad_parts.py").write_text(BAD_PARTS)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(ROOT))  # mypkg, which bad_parts builds on
    given = {"--model": "mypkg.stripes:build", "--dataset": "mypkg.stripes:load"}
    given.update(dict(zip(args[::2], args[1::2])) if "--download" not in args else {})
    flags = [word for pair in given.items() for word in pair] + (["--download"] if "--download" in args else [])
    lines = refused(capsys, monkeypatch, *flags, "--num-clients", "2", "--clients-per-round", "2", "--out", str(tmp_path / "run"))
    assert len(lines) == 1 and message in lines[0], lines
    assert not (tmp_path / "run").exists()
    sys.modules.pop("bad_parts", None)


def test_timm_and_hf_names_are_names_not_code():
    assert TIMM_PREFIX in NAMES_NOT_CODE and not is_code("timm:vit_tiny_patch16_224") and not is_code("hf:mnist")
    assert code_paths("fedpfn+mypkg.rules:Mine") == ["mypkg.rules:Mine"] and is_code("mypkg.stripes:load")
    assert re.fullmatch(r"[\w.]+:\w+", "mypkg.stripes:build")


MISBEHAVING = """
from flwr.serverapp.strategy import FedAvg
from fedpfn.core.models import MLP
def exits(*_): raise SystemExit(0)
def interrupts(*_): raise KeyboardInterrupt
class ExitsInForward(MLP):
    def forward(self, x): raise SystemExit(0)
def forward_exits(shape, classes): return ExitsInForward(shape, classes, 8)
class Wrapper(FedAvg):
    def __init__(self, strategy, exit: bool = True):
        raise SystemExit(0) if exit else KeyboardInterrupt
"""
WRAP = "misbehaving:Wrapper"
MISBEHAVIOUR = [
    (["--model", "misbehaving:exits"], 2, "model: misbehaving:exits((1, 28, 28), 10) raised SystemExit: 0"),
    (["--model", "misbehaving:interrupts"], 130, "model: misbehaving:interrupts((1, 28, 28), 10) raised KeyboardInterrupt"),
    (["--model", "misbehaving:forward_exits"], 2, "to (N, 10); its forward raised SystemExit: 0"),
    (["--dataset", "misbehaving:exits"], 2, "dataset: misbehaving:exits(None) raised SystemExit: 0"),
    (["--dataset", "misbehaving:interrupts"], 130, "dataset: misbehaving:interrupts(None) raised KeyboardInterrupt"),
    (["--server-wrap", WRAP], 2, "server_wrap: misbehaving:Wrapper() failed: SystemExit: 0"),
    (["--server-wrap", WRAP, "--server-wrap-args", '{"exit": false}'], 130,
     "server_wrap: misbehaving:Wrapper(exit) failed: KeyboardInterrupt"),
    (["--algorithm", "interrupting:Rule"], 130, "algorithm: cannot import module 'interrupting' (KeyboardInterrupt: )"),
]  # fmt: skip


@pytest.mark.parametrize(("args", "code", "says"), MISBEHAVIOUR, ids=[" ".join(a) for a, _, _ in MISBEHAVIOUR])
def test_a_users_code_that_exits_or_interrupts_itself_is_one_line_never_exit_0(args, code, says, tmp_path, capsys,
                                                                                monkeypatch):
    """A model, dataset or wrapper raising SystemExit exited 0 without a word, and KeyboardInterrupt
    gave a traceback (issue 58): exit 2, or 130 as a Ctrl-C, one line naming the dotted path."""
    from tests.support.commands import no_engine_starts

    (tmp_path / "misbehaving.py").write_text(MISBEHAVING)
    (tmp_path / "interrupting.py").write_text("raise KeyboardInterrupt\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    no_engine_starts(monkeypatch, lambda *_a, **_k: pytest.fail("an engine was about to start"))
    flags = ["--model", "mlp", *args] if "--model" not in args else args
    assert run_sim.main([*flags, "--num-clients", "2", "--clients-per-round", "2", "--out", str(tmp_path / "run")]) == code
    err = capsys.readouterr().err
    assert err.startswith("error: ") and says in err and err.count("\n") == 1, err
    assert not (tmp_path / "run").exists()
    for module in ("misbehaving", "interrupting"):
        sys.modules.pop(module, None)


@pytest.mark.parametrize(("model", "code", "says"), [
    ("misbehaving:exits", 2, "error: model: misbehaving:exits((1, 28, 28), 10) raised SystemExit: 0\n"),
    ("misbehaving:interrupts", 130, "error: model: misbehaving:interrupts((1, 28, 28), 10) raised KeyboardInterrupt: \n"),
])  # fmt: skip
def test_an_analysis_command_takes_the_users_model_it_names_and_its_misbehaviour_is_one_line(
    model, code, says, tmp_path, capsys, monkeypatch
):
    """`fedpfn pretrain --model pkg:build` was refused as code "only a file names", though typed."""
    from fedpfn.cli.main import main

    (tmp_path / "misbehaving.py").write_text(MISBEHAVING)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    assert main(["pretrain", "--model", model, "--epochs", "1", "--out", str(tmp_path / "pt")]) == code
    assert capsys.readouterr().err == says
    assert not (tmp_path / "pt").exists()
    sys.modules.pop("misbehaving", None)
