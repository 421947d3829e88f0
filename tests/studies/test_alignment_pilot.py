"""The alignment pilot as a declared study (studies/alignment_pilot/alignment_pilot.toml): the rule applied to planted
runs and controls, the page from the runs and again from its stored figures alone, status reading
the pilot's finished folders as done, and a bad pilot study file refused in one line (exit 2)."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from fedpfn.cli.main import main as fedpfn
from fedpfn.cli.study import configure
from fedpfn.core.data import find_data_problem
from fedpfn.study import page
from fedpfn.study.cells import config_of, main_cells
from fedpfn.study.commands import settings_of
from fedpfn.study.spec import Spec, load
from studies.alignment_pilot import readings as pilot

ROOT = Path(__file__).parents[2]
STUDY = "studies/alignment_pilot/alignment_pilot.toml"
RULE = ("# Pilot\n\nThe rule.\n\n<!-- results: everything below is written by fedpfn study page "
        "studies/alignment_pilot/alignment_pilot.toml -->\n\n<!-- study: pilot -->\n")  # fmt: skip
needs_fmnist = pytest.mark.skipif(find_data_problem("fmnist", None, False) is not None,
                                  reason="Fashion-MNIST not installed")  # fmt: skip


@pytest.fixture
def spec(tmp_path: Path, monkeypatch) -> Spec:
    """The pilot's study file in a folder of its own, its template a short rule: runs go to tmp_path."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / STUDY).parent.mkdir(parents=True)
    shutil.copy(ROOT / STUDY, tmp_path / STUDY)
    (tmp_path / "studies/alignment_pilot/alignment_pilot.md").write_text(RULE)
    return load(STUDY)


def run_folder(spec: Spec, regime: str, lr: str, arm: str, seed: int) -> Path:
    (cell,) = [c for c in main_cells(spec) if (c.arm, c.seed, dict(c.point)) == (arm, seed, {"regime": regime, "lr": lr})]
    return cell.folder


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


def plant_control(spec: Spec, regime: str, lr: str, control: list[float]) -> Path:
    """A block's lmc.json: diff-init's P for each seed, and the settings its cell's flags give."""
    controls = spec.parts["controls"]
    (cell,) = [c for c in main_cells(controls) if dict(c.point) == {"regime": regime, "lr": lr}]
    seeds = [{"seed": s, "permutation_loss": control[s]} for s in spec.seeds]
    cell.folder.mkdir(parents=True)
    config = settings_of(config_of(controls, cell, configure).settings)
    (cell.folder / "lmc.json").write_text(json.dumps({"config": config, "settings": {"diff-init": {"seeds": seeds}}}))
    return cell.folder


def plant_block(spec: Spec, regime: str, lr: str, p_plain: list[float], control: list[float],
                acc_plain: float = 0.8) -> None:  # fmt: skip
    for seed in spec.seeds:
        plant_run(run_folder(spec, regime, lr, "plain", seed), p_plain[seed], acc_plain + 0.001 * seed)
        plant_run(run_folder(spec, regime, lr, "anchored", seed), 0.0, 0.8)
    plant_control(spec, regime, lr, control)


def page_text(spec: Spec) -> str:
    """The page as `fedpfn study page` writes it from the runs (without planning every cell's config)."""
    pilot.write_stored(spec)
    return page.render(spec, None, pilot.READINGS)


def test_the_cheapest_block_that_misaligns_is_picked_and_stored_gives_the_same_page(spec: Spec, capsys) -> None:
    plant_block(spec, "r375", "0.1", [0.10, 0.12, 0.11], [1.0, 1.1, 1.2])  # qualifies
    plant_block(spec, "r114", "0.1", [0.05, 0.06, 0.07], [1.0, 1.1, 1.2])  # qualifies, and is cheaper
    plant_block(spec, "r225", "0.1", [0.01, -0.01, 0.0], [1.0, 1.1, 1.2])  # P(plain) not above 0
    plant_block(spec, "r375", "0.03", [0.10, 0.12, 0.11], [1.0, 1.1, 1.2], acc_plain=0.7)  # plain clients worse
    plant_run(run_folder(spec, "r24", "0.1", "plain", 0), 0.002, 0.8)  # a block begun, not finished
    going = run_folder(spec, "r24", "0.1", "plain", 1)
    plant_run(going, 0.03, 0.8)
    (going / "summary.json").unlink()  # still going: two rounds measured so far
    (going / "metrics.jsonl").write_text("".join((going / "metrics.jsonl").read_text().splitlines(True)[:2]))
    timed = [{"cell": "r375/lr0.1/plain/s0", "cpu_s": 36.0, "wall_s": 40.0}, {"cell": "r375/lr0.1/diff-init", "cpu_s": 9.0}]
    (spec.runs / "cpu.jsonl").write_text("".join(json.dumps(line) + "\n" for line in timed))
    text = page_text(spec)
    assert "**The pick: r114/lr0.1** (20 clients, 3 local epochs" in text and "`--num-clients 20 --local-epochs 3 --lr 0.1`" in text
    stored = json.loads(Path("docs/alignment/pilot.json").read_text())  # what the findings read
    assert stored["pick"] == "r114/lr0.1" and stored["finished"] == ["r375/lr0.1", "r114/lr0.1", "r225/lr0.1", "r375/lr0.03"]
    assert "Cheaper blocks not run: r24/lr0.1, r24/lr0.03, r24/lr0.01" in text  # begun is not finished
    assert "| r225/lr0.1 | 225 |" in text and "no: P(plain) in round 1; P(plain) at the last round" in text
    assert "no: plain's own accuracy below anchored's (r1); plain's own accuracy below anchored's (last)" in text
    assert "Not finished: r24/lr0.1 (1 of 6 runs finished, 1 begun, control not run)" in text
    assert "| r24/lr0.1 | 0 | +0.0020 | +0.0020 | not run | not run | +0.0020 | +0.0020 | not run |" in text
    assert "| r24/lr0.1 | 1 | +0.0300 | at round 2 of 5 | not run | not run | +0.0300 | at round 2 of 5 | not run |" in text
    assert "45 CPU-seconds (0.01 CPU-hours) over 2 cells" in text and "by regime: r375 36." in text  # a control is no run
    assert "took 0.5 s of wall time a measured round" in text and text.startswith(RULE.split("<!-- study")[0] + "## Results")
    shutil.rmtree(spec.runs)  # the runs gone: the stored figures alone
    assert fedpfn(["study", "page", "--stored", STUDY, "--trust-code"]) == 0
    assert capsys.readouterr().out == "wrote docs/alignment_pilot.md\n"
    assert Path("docs/alignment_pilot.md").read_text() == text


def test_no_block_qualifies_when_plain_clients_do_not_misalign(spec: Spec) -> None:
    plant_block(spec, "r375", "0.1", [0.01, -0.01, 0.0], [1.0, 1.1, 1.2])
    plant_block(spec, "r114", "0.1", [0.05, 0.06, 0.07], [1.0, 1.1, 1.2], acc_plain=0.7)  # misaligned, plain worse
    text = page_text(spec)
    assert "**No regime qualified** among the 2 blocks that ran" in text
    assert "Failed in every block: P(plain) at the last round." not in text  # only what failed in both is named
    assert "What to try next" not in text


def test_a_pilot_cut_short_says_the_rule_has_picked_nothing_yet(spec: Spec) -> None:
    plant_run(run_folder(spec, "r375", "0.1", "plain", 0), 0.05, 0.8)
    assert ("**No block finished**, so the rule has picked nothing yet and the main study waits for it: "
            "`fedpfn study run studies/alignment_pilot/alignment_pilot.toml` goes on") in page_text(spec)  # fmt: skip


def test_a_trained_round_that_never_misaligns_is_named_with_what_to_try_next(spec: Spec) -> None:
    for regime in ("r375", "r114"):
        plant_block(spec, regime, "0.1", [0.05, 0.06, 0.07], [1.0, 1.1, 1.2])
        for seed in spec.seeds:  # round 1 misaligned, the trained round not
            run = run_folder(spec, regime, "0.1", "plain", seed) / "metrics.jsonl"
            rows = [json.loads(line) for line in run.read_text().splitlines()]
            rows[-1]["align_permutation_loss"] = 0.0
            run.write_text("".join(json.dumps(r) + "\n" for r in rows))
    text = page_text(spec)
    assert "Failed in every block: P(plain) at the last round." in text and "What to try next" in text
    assert "more seeds would resolve round 1" not in text  # round 1 was resolved: more seeds are not the advice


def test_one_block_failing_in_both_rounds_is_read_as_one_and_more_seeds_are_suggested(spec: Spec) -> None:
    plant_block(spec, "r114", "0.1", [0.0, 0.0, 0.0], [1.0, 1.1, 1.2])  # no misalignment in either round
    text = page_text(spec)
    assert "**No regime qualified**: the block that ran did not" in text and "should not be run in it." in text
    assert "Failed there: P(plain) in round 1; P(plain) at the last round." in text
    assert "more seeds would resolve round 1 (3 cannot)" in text


@needs_fmnist
def test_status_reads_a_planted_control_as_done_and_the_page_without_runs_is_refused(spec: Spec, capsys) -> None:
    """A control cell runs the block's seeds together (one lmc.json); with no run begun the page
    is refused in one line and nothing is written."""
    assert fedpfn(["study", "page", STUDY, "--trust-code"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err == (f"error: study: {STUDY}: no run under runs/alignment-pilot has begun: fedpfn study run "
                                 f"{STUDY} first (page --stored writes the page from docs/alignment/pilot.json); "
                                 "nothing written\n")  # fmt: skip
    assert not Path("docs").exists()
    folder = plant_control(spec, "r24", "0.01", [1.0, 1.1, 1.2])
    assert fedpfn(["study", "status", STUDY]) == 0
    lines = capsys.readouterr().out.splitlines()
    states = dict(line.split(None, 1) for line in lines if line.startswith("runs/"))
    assert states[str(folder)] == "done" and states["runs/alignment-pilot/r24/lr0.1/diff-init"] == "missing"
    assert lines[-1].startswith("parts.controls: 12 cells: 11 missing, 1 done; 11 cells left")
    assert lines[-14].startswith("72 cells: 72 missing; 360 rounds left")


PILOT = ROOT / "runs" / "alignment-pilot"
KEPT = ["r114/lr0.1/plain/s0", "r114/lr0.1/anchored/s2", "r24/lr0.1/plain/s1"]  # finished runs of the pilot


@pytest.mark.skipif(not (PILOT / "r114/lr0.1/diff-init/lmc.json").is_file(), reason="the pilot's runs are not here")
def test_status_reads_copies_of_the_pilots_finished_folders_as_done(spec: Spec, capsys) -> None:
    """The study's cells are the folders the pilot's script wrote, with the settings they ran with:
    copies of three runs and a control (the files status reads; runs/ itself is only read) are done."""
    for cell in KEPT:
        (spec.runs / cell).mkdir(parents=True)
        for name in ("config.json", "summary.json", "metrics.jsonl"):
            shutil.copy(PILOT / cell / name, spec.runs / cell / name)
    (spec.runs / "r114/lr0.1/diff-init").mkdir()
    shutil.copy(PILOT / "r114/lr0.1/diff-init/lmc.json", spec.runs / "r114/lr0.1/diff-init/lmc.json")
    assert fedpfn(["study", "status", STUDY]) == 0
    lines = capsys.readouterr().out.splitlines()
    states = dict(line.split(None, 1) for line in lines if line.startswith("runs/"))
    assert all(states[f"runs/alignment-pilot/{cell}"] == "done" for cell in [*KEPT, "r114/lr0.1/diff-init"])
    assert sum(state == "done" for state in states.values()) == 4


BAD = {  # what is wrong with the pilot's file: (the text replaced, by what) -> the one line it is refused with
    "a part's page": (("[page]", "[parts.controls.page]\nout = 'x.md'\n[page]"),
                      "unknown key 'page' in parts.controls (accepted: command, runs, cell, seeds, shared, arms, labels, "
                      "axes, arm_seeds, not_run)"),
    "a regime not flags": (('r24 = "--train-subset 1200 --epochs 3"', "r24 = 3"),
                           "parts.controls: axes.regime.r24 must be flags as typed: a string or a list of strings"),
    "a part's command": (('command = "lmc"', 'command = "fedpfn"'),
                         "parts.controls: command = 'fedpfn' is not accepted (accepted: run, lmc"),
    "an axis not a list": (('lr = ["0.1", "0.03", "0.01"]', 'lr = "0.1"'),
                           "axes.lr = '0.1' is not a list of the flag's values, or a table of named flag sets"),
}  # fmt: skip


@pytest.mark.parametrize("case", list(BAD))
def test_a_bad_pilot_study_file_is_one_line_and_exit_2(case: str, spec: Spec, capsys) -> None:
    (old, new), said = BAD[case]
    text = Path(STUDY).read_text()
    assert old in text
    Path(STUDY).write_text(text.replace(old, new, 1))
    assert fedpfn(["study", "status", STUDY]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.startswith(f"error: study: {STUDY}: ") and said in err and err.count("\n") == 1
    assert not Path("runs").exists()


def test_the_page_reading_refuses_a_pilot_without_its_controls(spec: Spec, capsys) -> None:
    text = Path(STUDY).read_text()
    Path(STUDY).write_text(text[: text.index("[parts.controls]")] + text[text.index("[page]") :])
    Path("docs/alignment").mkdir(parents=True)
    shutil.copy(ROOT / "docs/alignment/pilot.json", "docs/alignment/pilot.json")
    assert fedpfn(["study", "page", "--stored", STUDY, "--trust-code"]) == 2
    err = capsys.readouterr().err
    assert err == (f"error: study: {STUDY}: page.readings: the pilot's readings read one control a block: [parts.controls] with "
                   "command = \"lmc\", one arm, the study's axes and a cell pattern without {seed}\n")  # fmt: skip
    assert not Path("docs/alignment_pilot.md").exists()


@needs_fmnist
def test_a_cell_the_study_runs_records_its_cpu_seconds_and_a_reused_one_does_not(tmp_path: Path, monkeypatch,
                                                                                 capsys) -> None:  # fmt: skip
    """What the pilot's script kept in cpu.jsonl, the runner now keeps for every study's cells."""
    monkeypatch.chdir(tmp_path)
    Path("s.toml").write_text('command = "lmc"\nruns = "runs/s"\ncell = "{arm}"\nshared = "--dataset fmnist --models 2 '
                              '--arms plain --matchers full --train-subset 100 --epochs 1 --points 3 --bn-batches 0 '
                              '--device cpu --model mlp --width 8 --split same-data"\n[arms]\nmlp8 = ""\n')  # fmt: skip
    assert fedpfn(["study", "run", "s.toml"]) == 0
    assert fedpfn(["study", "run", "s.toml"]) == 0  # reused: no second line
    (line,) = Path("runs/s/cpu.jsonl").read_text().splitlines()
    timed = json.loads(line)
    assert timed["cell"] == "mlp8" and timed["cpu_s"] > 0 and timed["wall_s"] > 0


def test_the_figure_draws_each_finished_blocks_stored_seeds_and_moves_with_them(spec: Spec) -> None:
    """The rule's figure from docs/alignment/pilot.json: a row per finished block (the unfinished
    left out), its dots the stored P of each seed, its mean and interval the table's; written and linked."""
    data = json.loads((ROOT / "docs/alignment/pilot.json").read_text())
    r1, last, control = pilot.figure_panels(spec, data).values()
    assert [s.label for s in r1] == [f"{n} ({data['blocks'][n]['steps']:.0f} steps)" for n in data["finished"]]
    assert "r375/lr0.03" not in data["finished"] and "r375/lr0.03" in data["blocks"]  # begun, not finished: not drawn
    for row, name in zip(range(len(r1)), data["finished"]):
        block = data["blocks"][name]
        plain = [block["runs"]["plain"][s] for s in ("0", "1", "2")]
        assert list(r1[row].points) == [f["P_r1"] for f in plain] and list(last[row].points) == [f["P_last"] for f in plain]
        assert list(control[row].points) == [block["control"][s] for s in ("0", "1", "2")]
        figures = pilot.judge(block)[0]
        assert (r1[row].mean, r1[row].low, r1[row].high) == figures["r1"]
        assert (control[row].mean, control[row].low, control[row].high) == figures["control"]
    data["blocks"]["r375/lr0.1"]["runs"]["plain"]["1"]["P_last"] = 5.0
    assert pilot.figure_panels(spec, data)["P(plain), round 5"][0].points[1] == 5.0
    line = pilot.figure(spec, data)[0]
    assert line.endswith("(alignment/pilot-P.png)") and Path("docs/alignment/pilot-P.png").read_bytes().startswith(b"\x89PNG")


def test_the_stored_file_keeps_each_runs_code_libraries_and_machine(spec: Spec) -> None:
    """A run's config.json provenance (commit, versions, CPU, threads) goes into the stored file, keyed by cell."""
    plant_block(spec, "r114", "0.1", [0.05, 0.06, 0.07], [1.0, 1.1, 1.2])
    made = {"git": {"commit": "abc"}, "device": {"cpu": "AMD EPYC", "torch_threads": 2}, "packages": {"torch": "2.14.1"}}
    (run_folder(spec, "r114", "0.1", "plain", 0) / "config.json").write_text(json.dumps({"provenance": made}))
    pilot.write_stored(spec)
    stored = json.loads(spec.page.stored.read_text())
    assert stored["provenance"] == {"r114/lr0.1/plain/s0": made}  # runs without a config.json: nothing invented


def test_the_summary_atop_the_page_says_the_pick_and_moves_with_the_runs(spec: Spec) -> None:
    """The page in short names the rule's answer and each finished block's P(plain) in rounds 1 and 5 as
    its table row reads them; a block planted to qualify turns 'no regime qualified' into its pick."""
    plant_block(spec, "r225", "0.1", [0.01, -0.01, 0.0], [1.0, 1.1, 1.2])  # P(plain) not above 0
    text = page_text(spec)
    short = "\n".join(pilot.in_short(spec))
    row = next(line for line in text.splitlines() if line.startswith("| r225/lr0.1 |")).split(" | ")
    assert "**no regime qualified** among the 1 finished block (" in short
    assert f"\n- r225/lr0.1 (225 local steps a round): {row[2]} and {row[3]}; qualifies: {row[-1].rstrip(' |')}" in short
    plant_block(spec, "r114", "0.1", [0.05, 0.06, 0.07], [1.0, 1.1, 1.2])  # qualifies
    pilot.write_stored(spec)
    short = "\n".join(pilot.in_short(spec))
    assert "**the pick is r114/lr0.1**" in short
    assert re.search(r"\n- r114/lr0.1 \(\d+ local steps a round\): \+0\.0600 \[.+; qualifies: yes\n", short)
