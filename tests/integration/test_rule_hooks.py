"""The client rule's two newer hooks, criterion and start, shown on FedLC and on a user's own
rule loaded by dotted path (`--algorithm package.module:Class`) and run on both engines."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from flwr.app import RecordDict

from clients import CLIENT_RULES, FedAvgClient
from clients.fedlc import SHIFT, FedLCClient
from fedpfn.core.cache import initial_model
from fedpfn.core.groups import Loop
from fedpfn.core.protocol import ACCEPTED_ROUND, to_array_record
from fedpfn.core.settings import ConfigError
from fedpfn.runtime.algorithms import client_rules
from fedpfn.runtime.engines.prepared import ClientJob
from fedpfn.runtime.engines.program import CohortProgram
from fedpfn.runtime.server import train_config
from tests.support.commands import refused
from tests.support.config import tiny_config
from tests.support.user_rule import USER_RULE

ROOT = Path(__file__).resolve().parents[2]
CPU = torch.device("cpu")


def round_message(cfg) -> RecordDict:
    config = train_config(cfg, 1)
    config[ACCEPTED_ROUND] = 0
    arrays = {k: v.numpy() for k, v in initial_model(cfg).state_dict().items()}
    return RecordDict({"arrays": to_array_record(arrays), "config": config})


def trained(cfg, rules=None) -> dict[str, np.ndarray]:
    """Client 0's uploaded model after one round of `cfg`'s rules (or `rules`)."""
    cohort = CohortProgram(rules or client_rules(cfg), cfg, round_message(cfg), CPU, [ClientJob(0, RecordDict(), 0)])
    return cohort.train(Loop).client_arrays(0)


def fedlc_criterion(counts: list[int], tau: float = 1.0):
    cfg = tiny_config(algorithm="fedlc", fedlc_tau=tau)
    cohort = CohortProgram(client_rules(cfg), cfg, round_message(cfg), CPU, [ClientJob(0, RecordDict(), 0)])
    rule = cohort.rules.rules[0]
    assert isinstance(rule, FedLCClient)
    shift = tau * torch.tensor(counts, dtype=torch.float32).clamp(min=1).pow(-0.25)
    shift = torch.where(torch.tensor(counts) > 0, shift, torch.tensor(float("inf")))
    return lambda logits, y: rule.criterion(logits, y, {SHIFT: shift})


def test_fedlc_reads_its_own_label_counts():
    cfg = tiny_config(algorithm="fedlc", partition="dirichlet", alpha=0.1, num_clients=4)
    cohort = CohortProgram(client_rules(cfg), cfg, round_message(cfg), CPU, [ClientJob(1, RecordDict(), 0)])
    data = cohort.clients[0].data
    counts = torch.bincount(data.y[data.train], minlength=10)
    shift = cohort.per_client[0][0][SHIFT]
    assert torch.isinf(shift[counts == 0]).all() and torch.isfinite(shift[counts > 0]).all()
    present = counts > 0
    assert torch.allclose(shift[present], counts[present].float().pow(-0.25))


def test_fedlc_with_even_counts_is_cross_entropy_and_with_skew_is_not():
    """The zero case: the same count for every class shifts every logit alike (cross-entropy).
    Skewed counts raise the loss of a rare class's example and lower a common one's (the sign)."""
    torch.manual_seed(0)
    logits, targets = torch.randn(8, 10), torch.randint(0, 10, (8,))
    even = fedlc_criterion([50] * 10)
    assert torch.allclose(even(logits, targets), F.cross_entropy(logits, targets), atol=1e-6)
    skewed = fedlc_criterion([1000, 1, *[50] * 8])
    flat = torch.zeros(1, 10)
    rare, common = torch.tensor([1]), torch.tensor([0])
    assert skewed(flat, rare) > F.cross_entropy(flat, rare) + 0.1
    assert skewed(flat, common) < F.cross_entropy(flat, common) - 0.1


def test_fedlc_a_class_the_client_lacks_leaves_the_sum():
    criterion = fedlc_criterion([10, 10, 0, *[10] * 7])
    logits, targets = torch.zeros(2, 10), torch.tensor([0, 1])
    huge = logits.clone()
    huge[:, 2] = 50.0  # the absent class's logit: it would dominate a plain softmax
    assert torch.equal(criterion(logits, targets), criterion(huge, targets))
    assert torch.isfinite(criterion(huge, targets))


def test_fedlc_trains_otherwise_than_fedavg_from_the_same_start():
    skewed = dict(partition="dirichlet", alpha=0.1, num_clients=4)
    fedavg = trained(tiny_config(algorithm="fedavg", **skewed))
    fedlc = trained(tiny_config(algorithm="fedlc", **skewed))
    moved = max(float(np.abs(fedavg[n] - fedlc[n]).max()) for n in fedavg)
    assert moved > 1e-3
    assert all(np.isfinite(v).all() for v in fedlc.values())


class FromZero(FedAvgClient):
    """A rule that starts every client from zero weights: the start hook, on its own."""

    name = "from-zero-test"

    def start(self, client, params, buffers):
        return {n: torch.zeros_like(p) for n, p in params.items()}, buffers


def test_the_start_hook_sets_what_a_client_trains_from():
    cfg = tiny_config()
    plain, zero = trained(cfg, [FedAvgClient]), trained(cfg, [FromZero])
    # an MLP started at zero has zero hidden activations: its first layer's weights get no gradient
    first = next(n for n in zero if n.endswith("weight"))
    assert not np.any(zero[first]) and np.any(plain[first])


@pytest.fixture()
def user_module(tmp_path) -> Path:
    folder = tmp_path / "userpkg"
    folder.mkdir()
    (folder / "user_rules_test.py").write_text(textwrap.dedent(USER_RULE))
    return folder


def run_cli(folder: Path, out: Path, *flags: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(folder), str(ROOT)]), "OMP_NUM_THREADS": "1"}
    command = [sys.executable, str(ROOT / "run_sim.py"), "--num-clients", "20", "--clients-per-round", "2",
               "--rounds", "1", "--partition", "iid", "--batch-size", "256", "--model", "mlp", "--out", str(out), *flags]  # fmt: skip
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=400, cwd=str(ROOT))


def test_a_users_rule_runs_by_dotted_path(user_module, tmp_path):
    """On the batched engine; on Ray's workers, from the folder the user runs in:
    tests/integration/test_code_guard.py (one Ray start for both questions)."""
    spec = "user_rules_test:LabelSmoothing"
    done = run_cli(user_module, tmp_path / "run", "--algorithm", spec, "--smoothing", "0.3", "--engine", "batched")
    assert done.returncode == 0, done.stderr[-2000:]
    saved = json.loads((tmp_path / "run" / "config.json").read_text())
    assert saved["algorithm"] == spec and saved["label_smoothing.smoothing"] == 0.3
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert rows and np.isfinite(rows[-1]["test_accuracy"])


def test_a_dotted_path_that_does_not_load_is_refused_in_one_line(user_module, tmp_path, capsys, monkeypatch):
    """As typed (one subprocess: the exit code and the one line), then the other cases in-process."""
    done = run_cli(user_module, tmp_path / "refused", "--algorithm", "user_rules_test:Missing")
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1, done.stderr
    assert lines[0].startswith("error: algorithm: 'user_rules_test:Missing' is not a client rule"), lines
    monkeypatch.syspath_prepend(str(user_module))
    cases = (
        ("no_such_module_x:Rule", "cannot import module 'no_such_module_x' (ModuleNotFoundError"),
        ("user_rules_test:SmoothingParams", "'user_rules_test:SmoothingParams' is not a client rule"),
        ("fedpfn.core.anchors:AnchorParams", "is not a client rule"),
    )
    for spec, reason in cases:
        (line,) = refused(capsys, monkeypatch, "--algorithm", spec, "--out", str(tmp_path / "refused"))
        assert line.startswith("error: algorithm: ") and reason in line, line
    assert not (tmp_path / "refused").exists()
    with pytest.raises(ConfigError, match="no_such_module_y"):
        tiny_config(algorithm="no_such_module_y:Rule")


def test_a_rule_is_registered_by_its_file_alone():
    assert CLIENT_RULES["fedlc"] is FedLCClient
    assert FedLCClient.__module__ == "clients.fedlc"
