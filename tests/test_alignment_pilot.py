"""The alignment pilot's page: the rule applied to planted runs, and `page --stored` byte for byte."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fedpfn.study import pilot
from scripts import alignment_pilot as runner

RULE = "# Pilot\n\nThe rule.\n\n" + pilot.MARKER + "\n\nNot run yet.\n"


def plant_run(folder: Path, p: float, acc: float) -> None:
    """A finished run's files as the pilot reads them: P and the clients' accuracy in rounds 1 and 5."""
    folder.mkdir(parents=True)
    rows = [{"round": r, "test_accuracy": 0.8, "align_permutation_loss": p, "align_moved_fraction": 0.1,
             "align_mean_client_acc": acc, "align_client_permutation_loss_full": [p, p / 2],
             "align_client_permutation_loss_changes": [p, p],
             "align_client_seconds": 0.5} for r in range(1, 6)]  # fmt: skip
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    clients = [{"round": r, "num_examples": 4800, "local_accuracy_after": acc} for r in range(1, 6)]
    (folder / "clients.jsonl").write_text("".join(json.dumps(c) + "\n" for c in clients))
    (folder / "summary.json").write_text("{}\n")


def plant_block(regime: str, lr: str, p_plain: list[float], control: list[float], acc_plain: float = 0.8) -> None:
    for seed in pilot.SEEDS:
        plant_run(pilot.run_path(regime, lr, "plain", seed), p_plain[seed], acc_plain + 0.001 * seed)
        plant_run(pilot.run_path(regime, lr, "anchored", seed), 0.0, 0.8)
    folder = pilot.control_path(regime, lr)
    folder.mkdir(parents=True)
    seeds = [{"seed": s, "permutation_loss": control[s]} for s in pilot.SEEDS]
    (folder / "lmc.json").write_text(json.dumps({"settings": {"diff-init": {"seeds": seeds}}}))


@pytest.fixture
def planted(tmp_path, monkeypatch):
    runs = tmp_path / "runs"
    monkeypatch.setattr(pilot, "RUNS", runs)
    monkeypatch.setattr(pilot, "TIMES", runs / "cpu.jsonl")
    monkeypatch.setattr(pilot, "PAGE", tmp_path / "pilot.md")
    monkeypatch.setattr(pilot, "STORED", tmp_path / "pilot.json")
    pilot.PAGE.write_text(RULE)
    return runs


def test_the_cheapest_block_that_misaligns_is_picked_and_stored_gives_the_same_page(planted):
    plant_block("r375", "0.1", [0.10, 0.12, 0.11], [1.0, 1.1, 1.2])  # qualifies
    plant_block("r114", "0.1", [0.05, 0.06, 0.07], [1.0, 1.1, 1.2])  # qualifies, and is cheaper
    plant_block("r225", "0.1", [0.01, -0.01, 0.0], [1.0, 1.1, 1.2])  # P(plain) not above 0
    plant_block("r375", "0.03", [0.10, 0.12, 0.11], [1.0, 1.1, 1.2], acc_plain=0.7)  # plain clients worse
    plant_run(pilot.run_path("r24", "0.1", "plain", 0), 0.002, 0.8)  # a block begun, not finished
    plant_run(pilot.run_path("r24", "0.1", "plain", 1), 0.03, 0.8)
    going = pilot.run_path("r24", "0.1", "plain", 1)
    (going / "summary.json").unlink()  # still going: two rounds measured so far
    (going / "metrics.jsonl").write_text("".join((going / "metrics.jsonl").read_text().splitlines(True)[:2]))
    (planted / "cpu.jsonl").write_text(json.dumps({"cell": "r375/lr0.1/plain/s0", "cpu_s": 36.0, "wall_s": 40.0}) + "\n")
    assert runner.main(["page"]) == 0
    written = pilot.PAGE.read_bytes()
    text = written.decode()
    assert "**The pick: r114/lr0.1** (20 clients, 3 local epochs" in text and "`--num-clients 20 --local-epochs 3 --lr 0.1`" in text
    stored = json.loads(pilot.STORED.read_text())  # what the findings read
    assert stored["pick"] == "r114/lr0.1" and stored["finished"] == ["r375/lr0.1", "r375/lr0.03", "r114/lr0.1", "r225/lr0.1"]
    assert "Cheaper blocks not run: r24/lr0.1, r24/lr0.03, r24/lr0.01" in text  # begun is not finished
    assert "| r225/lr0.1 | 225 |" in text and "no: P(plain) in round 1; P(plain) at the last round" in text
    assert "no: plain's own accuracy below anchored's (r1); plain's own accuracy below anchored's (last)" in text
    assert "Not finished: r24/lr0.1 (1 of 6 runs finished, 1 begun, control not run)" in text
    assert "| r24/lr0.1 | 0 | +0.0020 | +0.0020 | not run | not run | +0.0020 | +0.0020 | not run |" in text
    assert "| r24/lr0.1 | 1 | +0.0300 | at round 2 of 5 | not run | not run | +0.0300 | at round 2 of 5 | not run |" in text
    assert "36 CPU-seconds (0.01 CPU-hours) over 1 cells" in text and "by regime: r375 36." in text
    assert "took 0.5 s of wall time a measured round" in text and text.startswith(RULE.split(pilot.MARKER)[0])
    for run in planted.rglob("metrics.jsonl"):
        run.unlink()  # the runs gone: the stored figures alone
    pilot.PAGE.write_text(RULE)
    assert runner.main(["page", "--stored"]) == 0
    assert pilot.PAGE.read_bytes() == written


def test_no_block_qualifies_when_plain_clients_do_not_misalign(planted):
    plant_block("r375", "0.1", [0.01, -0.01, 0.0], [1.0, 1.1, 1.2])
    plant_block("r114", "0.1", [0.05, 0.06, 0.07], [1.0, 1.1, 1.2], acc_plain=0.7)  # misaligned, plain worse
    runner.main(["page"])
    text = pilot.PAGE.read_text()
    assert "**No regime qualified** among the 2 blocks that ran" in text
    assert "Failed in every block: P(plain) at the last round." not in text  # only what failed in both is named
    assert "What to try next" not in text


def test_a_pilot_cut_short_says_the_rule_has_picked_nothing_yet(planted):
    plant_run(pilot.run_path("r375", "0.1", "plain", 0), 0.05, 0.8)
    runner.main(["page"])
    assert "**No block finished**, so the rule has picked nothing yet" in pilot.PAGE.read_text()


def test_page_without_runs_leaves_the_page_alone(planted, capsys):
    with pytest.raises(SystemExit) as refused:
        runner.main(["page"])
    err = capsys.readouterr().err
    assert refused.value.code == 2 and err.startswith("error: no runs under") and err.count("\n") == 1
    assert pilot.PAGE.read_text() == RULE and not pilot.STORED.exists()


def test_a_trained_round_that_never_misaligns_is_named_with_what_to_try_next(planted):
    for regime in ("r375", "r114"):
        plant_block(regime, "0.1", [0.05, 0.06, 0.07], [1.0, 1.1, 1.2])
        for seed in pilot.SEEDS:  # round 1 misaligned, the trained round not
            run = pilot.run_path(regime, "0.1", "plain", seed) / "metrics.jsonl"
            rows = [json.loads(line) for line in run.read_text().splitlines()]
            rows[-1]["align_permutation_loss"] = 0.0
            run.write_text("".join(json.dumps(r) + "\n" for r in rows))
    runner.main(["page"])
    text = pilot.PAGE.read_text()
    assert "Failed in every block: P(plain) at the last round." in text and "What to try next" in text


def test_the_committed_page_is_what_its_stored_figures_write() -> None:
    """`alignment_pilot.py page --stored` writes docs/alignment_pilot.md again, byte for byte."""
    page = pilot.PAGE.read_text()
    stored = json.loads(pilot.STORED.read_text())
    assert page.split(pilot.MARKER)[1] == "\n\n" + pilot.results(stored)
