"""A user's model that misbehaves only once a run feeds it (issue 58, item 5): one that passes
fedpfn's batch of two zeros at construction but fails on the run's real batches is one `error:`
line naming it, exit 2, before the run folder is made."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.commands import refused

PARTS = '''
import torch
from torch import nn
from fedpfn.core.models import ZooModel


class Small(ZooModel):
    def __init__(self, shape, classes, represent):
        super().__init__()
        self.body = nn.Linear(shape[0] * shape[1] * shape[2], 16)
        self.classifier = nn.Linear(16, classes)
        self._represent = represent

    def represent(self, x):
        return self._represent(self, x)


def two_only(shape, classes):  # a reshape fixed to the batch of two it was tried on
    return Small(shape, classes, lambda m, x: torch.relu(m.body(x.reshape(2, -1))))


def training_only(shape, classes):  # fails the server's evaluation, in eval mode
    def represent(m, x):
        assert m.training or len(x) == 2, "evaluation batches are not supported"
        return torch.relu(m.body(x.flatten(1)))
    return Small(shape, classes, represent)


def exits_on_data(shape, classes):  # zeros pass; a real image calls sys.exit
    def represent(m, x):
        if x.abs().sum() > 0:
            raise SystemExit(0)
        return torch.relu(m.body(x.flatten(1)))
    return Small(shape, classes, represent)
'''

TINY = ["--num-clients", "2", "--clients-per-round", "2", "--rounds", "1", "--partition", "iid"]
CASES = [
    ("two_only", "model: h58_parts:two_only fails on a training batch of 64 of the run's data: RuntimeError: "),
    ("training_only", "model: h58_parts:training_only fails on an evaluation batch of 256 of the run's data: "
     "AssertionError: evaluation batches are not supported"),
    ("exits_on_data", "model: h58_parts:exits_on_data fails on a training batch of 64 of the run's data: SystemExit: 0"),
]  # fmt: skip


@pytest.mark.parametrize(("builder", "says"), CASES, ids=[c[0] for c in CASES])
def test_a_model_that_fails_only_on_real_data_is_one_line_before_the_folder(
    builder: str, says: str, tmp_path: Path, monkeypatch, capsys
) -> None:
    (tmp_path / "h58_parts.py").write_text(PARTS)
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "run"
    lines = refused(capsys, monkeypatch, "--model", f"h58_parts:{builder}", *TINY, "--out", str(out))
    assert len(lines) == 1 and lines[0].startswith("error: " + says), lines
    assert not out.exists()
