"""Federated evaluation (`--evaluate-clients F`, issue 43 item 5): the sampled clients judge the
global model, and their own where they keep personal entries, on their local test splits; the
server records the weighted and plain mean, the 10th percentile and the worst client."""

from __future__ import annotations

import json

import numpy as np
import pytest

from fedpfn.analysis.client_eval import client_eval_table
from fedpfn.analysis.report import main as report_main
from fedpfn.core import protocol
from fedpfn.core.files import CONFIG, METRICS, read_jsonl
from fedpfn.core.settings import ConfigError
from fedpfn.runtime import federated_eval
from fedpfn.runtime.simulation import simulate
from fedpfn.runtime.tracking import scalars
from tests.support.commands import refused
from tests.support.config import tiny_config

def test_the_summary_weights_by_examples_and_names_the_worst_client():
    replies = {
        3: {protocol.NUM_EXAMPLES: 10, federated_eval.ACCURACY: 0.9, federated_eval.LOSS: 0.1},
        0: {protocol.NUM_EXAMPLES: 30, federated_eval.ACCURACY: 0.5, federated_eval.LOSS: 0.5},
        7: {protocol.NUM_EXAMPLES: 60, federated_eval.ACCURACY: 0.8, federated_eval.LOSS: 0.2},
    }
    summary = federated_eval.summarise(replies)
    assert summary["fed_eval_accuracy_weighted"] == pytest.approx((9 + 15 + 48) / 100)
    assert summary["fed_eval_accuracy_mean"] == pytest.approx(2.2 / 3)
    assert summary["fed_eval_accuracy_p10"] == pytest.approx(np.percentile([0.5, 0.8, 0.9], 10))
    assert summary["fed_eval_accuracy_worst"] == 0.5
    assert summary["fed_eval_worst_partition"] == 0
    assert summary["fed_eval_loss_weighted"] == pytest.approx((1 + 15 + 12) / 100)
    assert "fed_eval_personal_accuracy_mean" not in summary  # no client kept a model of its own


def test_the_evaluating_clients_are_seeded_and_at_least_one():
    cfg = tiny_config(num_clients=10, evaluate_clients=0.3, local_test_fraction=0.2)
    chosen = federated_eval.sample_evaluators(cfg, 2)
    assert chosen == federated_eval.sample_evaluators(cfg, 2) and len(chosen) == 3
    assert any(federated_eval.sample_evaluators(cfg, r) != chosen for r in range(3, 8))  # round by round
    assert len(federated_eval.sample_evaluators(tiny_config(evaluate_clients=0.01, local_test_fraction=0.2), 1)) == 1


@pytest.mark.parametrize(
    "args,message",
    [
        (["--evaluate-clients", "0.5"], "evaluate_clients: 0.5 evaluates on each client's local test split; give"),
        (["--evaluate-clients-every", "2"], "evaluate_clients_every: 2 is set, but only --evaluate-clients F"),
        (["--evaluate-clients", "1.5", "--local-test-fraction", "0.2"], "evaluate_clients: 1.5 must be in [0, 1]"),
    ],
)
def test_unusable_federated_evaluation_is_refused_in_one_line(tmp_path, capsys, monkeypatch, args, message):
    lines = refused(capsys, monkeypatch, *args, "--out", str(tmp_path / "run"))
    assert len(lines) == 1 and message in lines[0], lines
    assert not (tmp_path / "run").exists()


def test_a_run_without_it_keeps_its_settings_and_folder_as_before():
    """Off, the two settings are not written: older run folders resume, default folders keep their names."""
    plain = tiny_config(out=None)
    assert "evaluate_clients" not in plain.to_dict() and "evaluate_clients_every" not in plain.fingerprint()
    on = tiny_config(out=None, evaluate_clients=0.5, local_test_fraction=0.2)
    assert on.fingerprint()["evaluate_clients"] == 0.5 and on.run_dir != plain.run_dir


def test_a_batched_run_records_the_clients_figures_global_and_personal(tmp_path):
    """Every 2nd round (and the last) half the clients evaluate; with personal classifiers their
    own model differs from the global one; the rounds between keep the columns, empty."""
    out = tmp_path / "run"
    cfg = tiny_config(
        out=str(out), rounds=3, personal="classifier.*", evaluate_clients=0.5, evaluate_clients_every=2,
        local_test_fraction=0.2, batch_size=200,
    )  # fmt: skip
    simulate(cfg, show_progress=False)
    rows = read_jsonl(out / METRICS)
    assert [row["fed_eval_clients"] for row in rows] == [None, 2, 2]
    for row in rows[1:]:
        assert row["fed_eval_accuracy_worst"] <= row["fed_eval_accuracy_p10"] <= row["fed_eval_accuracy_mean"]
        assert 0 < row["fed_eval_accuracy_weighted"] <= 1 and row["fed_eval_failures"] == 0
        assert row["fed_eval_personal_accuracy_mean"] != row["fed_eval_accuracy_mean"]
        assert row["fed_eval_worst_partition"] in federated_eval.sample_evaluators(cfg, row["round"])
    saved = json.loads((out / CONFIG).read_text())
    assert (saved["evaluate_clients"], saved["evaluate_clients_every"]) == (0.5, 2)
    logged = scalars(rows[-1], [])  # TensorBoard's and W&B's names; none in a round without them
    assert logged["fed_eval/accuracy_p10"] == rows[-1]["fed_eval_accuracy_p10"] and "fed_eval/clients" in logged
    assert not any(name.startswith("fed_eval/") for name in scalars(rows[0], []))
    assert report_main([str(out), "--out", str(tmp_path / "report")]) == 0  # the report shows them
    lines = (tmp_path / "report" / "report.md").read_text().splitlines()
    shown = {line.split(" | ")[1]: line for line in lines if line.startswith("| ") and " model | 3 | " in line}
    last = rows[-1]
    assert f"| {100 * last['test_accuracy']:.2f} | {100 * last['fed_eval_accuracy_weighted']:.2f} |" in shown["global model"]
    assert shown["global model"].endswith(f"| {100 * last['fed_eval_accuracy_worst']:.2f} |")
    assert f"| {100 * last['fed_eval_personal_accuracy_p10']:.2f} |" in shown["each client's own model"]


def test_the_report_refuses_a_damaged_figure_in_one_line():
    rows = [{"round": 1, "test_accuracy": 0.5, "fed_eval_accuracy_mean": "0.9"}]
    with pytest.raises(ConfigError, match=r"^runs: round 1's fed_eval_accuracy_mean is '0.9', not an accuracy"):
        client_eval_table(["fedavg"], [[rows]])
    assert client_eval_table(["fedavg"], [[[{"round": 1, "test_accuracy": 0.5}]]]) == []  # none: no table
