"""The tutorial (docs/getting-started/tutorial.md) run for real, in a fresh copy of the checkout.

tests/integration/test_docs_site.py checks every page's commands up to where training would start; this
test trains: each `fedpfn` command of the page runs as written, in the page's order (a later
step reads what an earlier one wrote), and what the page says each one produces is checked
against the run folders and the printed lines. The setup commands of step 0 (`make setup`,
the venv's activation) are the docs test's to check. Its runs are tiny, so that the page adds
little to the suite.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from fedpfn.cli.main import main as fedpfn
from tests.support.site_commands import fresh_checkout, page_commands, program_words

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "getting-started" / "tutorial.md"


def out_folder(words: list[str]) -> str:
    return words[words.index("--out") + 1] if "--out" in words else words[2]


def read_rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def run_page(copy: Path, capsys) -> dict[str, str]:
    """Every `fedpfn` command of the page, in order: what each printed, by the folder it names."""
    printed, fedpfn_commands = {}, 0
    for command in page_commands(PAGE):
        words = program_words(command)
        if words[0] != "fedpfn":
            assert words[:2] in (["make", "setup"], [".", ".venv/bin/activate"]), command
            continue
        fedpfn_commands += 1
        code = fedpfn(words[1:])
        shown = capsys.readouterr()
        assert code == 0, f"`{command}` exited {code}: {shown.err[-2000:]}"
        folder = out_folder(words)  # seeds-needed reads the comparison's: what both printed
        printed[folder] = printed.get(folder, "") + shown.out + shown.err
    assert fedpfn_commands == 8, fedpfn_commands  # none dropped: a renamed block would skip them
    return printed


def check_first_run(run: Path) -> None:
    for name in ("config.json", "metrics.jsonl", "summary.json", "accuracy.png", "checkpoint.npz"):
        assert (run / name).is_file(), name


def check_comparison(folder: Path, printed: str) -> None:
    """The comparison resolves: FedPFN at 90 % anchors is lower, the interval below zero."""
    report = json.loads((folder / "comparison.json").read_text())
    assert report["seeds"] == [0, 1, 2]
    for paired in report["paired"]:
        assert paired["label"] == "fedpfn" and paired["verdict"] == "lower", paired
        assert paired["high"] < 0 and paired["p_holm"] < 0.05 and paired["p_floor"] == 0.25, paired
    assert re.search(r"^fedpfn .*lower", printed, re.MULTILINE), printed[-3000:]
    assert (folder / "comparison.md").is_file() and (folder / "comparison.png").is_file()


def check_privacy(run: Path, printed: str) -> None:
    assert re.search(r"^\s*privacy\s+ε [\d.]+ at δ 1e-05", printed, re.MULTILINE), printed[-2000:]
    rows = read_rows(run / "metrics.jsonl")
    assert len(rows) == 2 and all(row["dp_epsilon"] > 0 for row in rows), rows
    assert json.loads((run / "summary.json").read_text())["dp_epsilon"] == rows[-1]["dp_epsilon"]


def check_attack(fedavg: Path, median: Path, printed: dict[str, str]) -> None:
    """FedAvg ends near chance (10 classes), the median far above it; the header names the attack
    and how many clients it turned."""
    final = {run: read_rows(run / "metrics.jsonl")[-1]["test_accuracy"] for run in (fedavg, median)}
    assert final[fedavg] < 0.2 and final[median] > 0.5, final
    for run in (fedavg, median):
        header = printed[f"runs/tutorial/{run.name}"]
        assert re.search(r"^\s*attack\s+sign-flip\b.*\b3 of 10\b", header, re.MULTILINE), header[:2000]
        marked = [row["malicious"] for row in read_rows(run / "clients.jsonl")]
        assert len(marked) == 10 and marked.count(True) == 3, marked  # "three of ten clients"


def check_federated_evaluation(run: Path) -> None:
    """Half of the 10 clients evaluate: metrics get the fed_eval_ keys; the clients that trained
    record their local accuracy before and after training."""
    row = read_rows(run / "metrics.jsonl")[-1]
    assert row["fed_eval_clients"] == 5 and row["fed_eval_failures"] == 0, row
    for key in ("accuracy_weighted", "accuracy_mean", "accuracy_p10", "accuracy_worst", "worst_partition"):
        assert row[f"fed_eval_{key}"] is not None, key
    trained = read_rows(run / "clients.jsonl")
    assert len(trained) == 2 and all("local_accuracy_before" in r and "local_accuracy_after" in r for r in trained)


@pytest.mark.slow  # 38 to 51 s at load 3 to 6 on 2 cores, 24 to 29 s of CPU: twelve tiny runs and a report
def test_the_tutorial_runs_as_written_and_shows_what_it_says(tmp_path_factory, monkeypatch, capsys):
    copy = fresh_checkout(tmp_path_factory)
    monkeypatch.chdir(copy)
    monkeypatch.setenv("HOME", str(copy / "home"))
    printed = run_page(copy, capsys)
    runs = copy / "runs" / "tutorial"
    check_first_run(runs / "first")
    check_comparison(runs / "compare", printed["runs/tutorial/compare"])
    check_privacy(runs / "dp", printed["runs/tutorial/dp"])
    check_attack(runs / "attack-fedavg", runs / "attack-median", printed)
    check_federated_evaluation(runs / "fed-eval")
    assert (runs / "stripes" / "summary.json").is_file()
