"""docs/alignment.md's readings, computed from planted cells: what (a) and (b) may and may not say;
the page is what `fedpfn study page --stored studies/alignment_gate/alignment_gate.toml --trust-code` writes, byte for byte, and
`fedpfn study page` merges the finished cells with the kept ones."""

from __future__ import annotations

import json
from pathlib import Path

from fedpfn.analysis.paired_text import VERDICT_KEY
from fedpfn.cli.main import main as fedpfn
from fedpfn.cli.study import configure
from fedpfn.study.cells import config_of, main_cells
from fedpfn.study.commands import settings_of
from fedpfn.study.spec import load
from studies.alignment_gate import gate
from studies.alignment_gate import readings as page
from tests.support.gate_cells import ARMS, MOVING, planted

ROOT = Path(__file__).parents[2]
GATE = ("studies/alignment_gate/alignment_gate.toml", "studies/alignment_gate/alignment.md", "docs/alignment/cells.json")  # what the page reads


def test_a_regime_with_misalignment_passes_a_and_b_splits_it() -> None:
    cells = {"mlp-same-init": planted(MOVING)}
    _, found, said = gate.question_a(cells)
    assert found == ["mlp-same-init"] and "P(plain) > 0: the interval excludes 0" in said[0]
    lines, said_b = gate.question_b(cells, found)
    assert "one Holm family of the 3 tests below" in "\n".join(lines)  # the accuracies planted equal: no test
    p_split = gate.regime_splits("mlp-same-init", cells["mlp-same-init"])[0]
    assert p_split.freezing.mean < 0 and p_split.sharing.mean < 0  # both parts lower P, as planted
    assert [s.split(":")[1].strip() for s in said_b] == ["freezing (independent − plain)", "sharing (shared − independent)"]


def test_a_regime_is_one_holm_family_whatever_other_regimes_there_are() -> None:
    one = {"a": planted(MOVING)}
    two = {"a": planted(MOVING), "b": planted({**MOVING, "shared-0.4": [0.05, 0.06, 0.04, 0.05]})}
    alone = gate.question_b(one, ["a"])[0]
    beside = gate.question_b(two, ["a", "b"])[0]
    assert alone[-1] == beside[-1] == VERDICT_KEY  # what the verdict cells' words mean, once under (b)'s tables
    assert beside[: len(alone) - 2] == alone[:-2]  # a regime added later re-adjusts no published p


def test_other_matchers_are_read_where_the_cells_carry_them() -> None:
    cells = planted(MOVING)
    for arms in cells["seeds"].values():
        for arm, figures in arms.items():
            figures["matchers"] = {"masked": {"permutation_loss": 2 * figures["permutation_loss"]}}
    assert gate.matchers_in(cells) == ["full", "masked"]
    table, _, said = gate.question_a({"r": cells})
    assert [line.split(" | ")[1] for line in table[2:-2]] == ["full", "masked"]
    assert [line.split(" | ")[-1] for line in table[2:-2]] == ["P(plain) > 0 |"] * 2  # the reading's words;
    assert table[-1] == gate.A_KEY  # what they mean, once under the table
    assert gate.matchers_in(planted(MOVING)) == ["full"]


def test_no_misalignment_is_not_read_as_misalignment() -> None:
    flat = {**MOVING, "plain": [0.01, -0.01, 0.0, 0.005]}
    _, found, said = gate.question_a({"r": planted(flat)})
    assert found == [] and "not shown: the interval excludes P(plain) above" in said[0]
    assert gate.question_b({"r": planted(flat)}, found)[0] == ["No regime passed (a), so (b) has nothing to test here."]


def test_a_regime_whose_positive_control_did_not_move_is_void() -> None:
    dead = {**MOVING, "diff-init": [0.01, -0.01, 0.0, 0.005]}
    _, found, said = gate.question_a({"r": planted(dead)})
    assert found == [] and "void: the positive control" in said[0]


def test_too_few_seeds_wait_instead_of_answering() -> None:
    cells = {"r": planted(MOVING, seeds=6)}
    _, found, _ = gate.question_a(cells)
    lines, said_b = gate.question_b(cells, found)
    assert found == ["r"] and said_b == [] and "r: not yet answered, 6 of the 10 seeds" in lines[1]
    _, _, said = gate.question_a({"r": planted(MOVING, seeds=3)})
    assert "not yet read: 3 of the 5 seeds" in said[0]
    _, _, said = gate.question_a({"r": planted(MOVING, seeds=1)})  # one seed: no control interval yet, not void
    assert "not yet read: 1 of the 5 seeds" in said[0] and "void" not in said[0]


def test_the_page_says_when_its_cells_come_from_more_than_one_machine() -> None:
    from fedpfn.core.provenance import collect

    here = collect()
    there = {**here, "device": {**here["device"], "cpu": "Another CPU"}}
    one = {"r": {**planted(MOVING), "provenance": {"seed0": here, "seed1": here}}}
    assert page.machines(one) == "Every cell ran on one machine with one set of libraries."
    two = {"r": {**planted(MOVING), "provenance": {"seed0": here, "seed1": there}}}
    assert page.machines(two).startswith("The results on this page come from 2 machines")
    kept_before = {"r": planted(MOVING)}  # cells.json written before cells recorded a provenance
    assert "machine not recorded" in page.machines(kept_before)


def test_runs_here_replace_a_kept_regime_only_once_they_cover_its_seeds() -> None:
    kept = {"r": planted(MOVING)}
    fewer = {"r": planted(MOVING, seeds=4)}
    cells, waiting = page.merged(kept, fewer)
    assert cells["r"] is kept["r"] and waiting == ["r: 4 cells run here wait to cover the 10 kept seeds"]
    cells, waiting = page.merged(kept, {"r": planted(MOVING), "new": planted(MOVING, seeds=2)})
    assert waiting == [] and set(cells) == {"r", "new"}


def test_the_committed_page_is_what_its_stored_cells_write(tmp_path: Path, monkeypatch, capsys) -> None:
    """A copy holding only the gate's study, its template and its kept cells writes docs/alignment.md again."""
    for path in GATE:
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_bytes((ROOT / path).read_bytes())
    monkeypatch.chdir(tmp_path)
    assert fedpfn(["study", "page", "--stored", GATE[0], "--trust-code"]) == 0
    assert capsys.readouterr().out == "wrote docs/alignment.md\n"
    assert (tmp_path / "docs/alignment.md").read_bytes() == (ROOT / "docs/alignment.md").read_bytes()


SMALL = """command = "lmc"
runs = "runs/alignment"
cell = "{arm}/seed{seed}"
seeds = [0, 1]
shared = "--dataset fmnist --models 2 --device cpu"

[arms]
r = "--model mlp --lr 0.1"
q = "--model mlp --lr 0.05"
w = "--model mlp --lr 0.01"

[not_run]
w = "why w waits"

[page]
out = "page.md"
stored = "cells.json"
text = '''{regimes}
'''
readings = "studies.alignment_gate.readings:READINGS"  # the study's own readings (fedpfn.study.readings): fedpfn study page --trust-code
"""


def test_the_page_from_the_runs_merges_finished_cells_with_the_kept_ones(tmp_path: Path, monkeypatch, capsys) -> None:
    """A regime's runs replace its kept cells once they cover as many seeds; a cell still running (no lmc.json)
    is left out; a regime not run says why; the page from the runs is the page from what it stored."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "gate.toml").write_text(SMALL)
    spec = load("gate.toml")
    assert fedpfn(["study", "page", "gate.toml", "--trust-code"]) == 2
    assert "no finished cell under runs/alignment; fedpfn study run gate.toml first" in capsys.readouterr().err
    (tmp_path / "cells.json").write_text(json.dumps({"r": planted(MOVING, seeds=2)}))
    for cell in main_cells(spec):
        if (cell.arm, cell.seed) in (("r", 0), ("q", 0)):
            cell.folder.mkdir(parents=True)
            seeds = [{"seed": cell.seed, **dict.fromkeys(page.KEPT, 0.5)}]
            result = {"config": settings_of(config_of(spec, cell, configure).settings),
                      "settings": {arm: {"seeds": seeds} for arm in ARMS}}  # fmt: skip
            (cell.folder / "lmc.json").write_text(json.dumps(result))
    assert fedpfn(["study", "page", "gate.toml", "--trust-code"]) == 0
    out = capsys.readouterr().out
    assert out == "r: 1 cells run here wait to cover the 2 kept seeds\nwrote page.md\n"
    stored = json.loads((tmp_path / "cells.json").read_text())
    assert list(stored) == ["q", "r"] and stored["r"] == json.loads(json.dumps(planted(MOVING, seeds=2)))
    assert list(stored["q"]["seeds"]) == ["0"] and stored["q"]["config"]["lr"] == 0.05
    written = (tmp_path / "page.md").read_text()
    assert written.splitlines()[2:] == ["| r | 2 (0-1) | `--model mlp --lr 0.1` |", "| q | 1 (0-0) | `--model mlp --lr 0.05` |",
                                        "| w | not run: why w waits | `--model mlp --lr 0.01` |"]  # fmt: skip
    assert fedpfn(["study", "page", "--stored", "gate.toml", "--trust-code"]) == 0
    assert (tmp_path / "page.md").read_text() == written


def test_the_summary_says_where_matchers_disagree() -> None:
    cells = planted(MOVING)
    for arms in cells["seeds"].values():  # under `masked`, shared is as high as plain: sharing reversed
        for arm, figures in arms.items():
            value = figures["permutation_loss"] if arm != "shared-0.4" else 0.5
            figures["matchers"] = {"masked": {"permutation_loss": value}}
    _, said = gate.question_b({"r": cells}, ["r"])
    assert said[-1].startswith("r: sharing's share of the drop in P, by matcher: full") and said[-1].endswith(
        "the matchers disagree on the parts' verdicts.")  # fmt: skip
    same = planted(MOVING)
    for arms in same["seeds"].values():
        for figures in arms.values():
            figures["matchers"] = {"masked": {"permutation_loss": figures["permutation_loss"]}}
    assert gate.question_b({"r": same}, ["r"])[1][-1].endswith("the matchers agree on both parts' verdicts.")


def test_a_regime_whose_plain_model_diverged_is_void_and_the_table_says_where() -> None:
    """A diverged seed is kept as such (which model, which lr), left out of every figure, and makes (a) void:
    the regime does not train at its lr, whatever the other seeds read."""
    regime = planted(MOVING, seeds=5)
    record = {"seed": 2, "diverged": "model 1's weights are not finite after training (it diverged at lr 0.1)"}
    regime["seeds"]["2"]["plain"] = page.figures_of(record)
    assert regime["seeds"]["2"]["plain"] == {"diverged": record["diverged"]}
    assert gate.diverged(regime, "plain") == [2] and gate.diverged(regime, "shared-0.4") == []
    assert sorted(gate.series(regime, "plain", "permutation_loss")) == [0, 1, 3, 4]
    _, found, said = gate.question_a({"r": regime})
    assert found == [] and "void: a plain model diverged in seed 2, so this regime does not train" in said[0]
    table = gate.regimes_table({"r": regime}, {"r": ["--lr", "0.1"], "q": []}, {"q": "why q waits"})
    assert table[2:] == ["| r | 5 (0-4); plain diverged in seed(s) 2 | `--lr 0.1` |", "| q | not run: why q waits | `` |"]


def on(regime: dict, machines: dict[int, dict | None]) -> dict:
    """`regime` with each seed's cell provenance as `runs_here` keeps it (per cell folder, `seed<k>`)."""
    return {**regime, "provenance": {f"seed{seed}": found for seed, found in machines.items()}}


def test_the_step_control_pairs_anchored_arms_at_lr_0_1_with_plain_at_the_smaller_step() -> None:
    """Seed by seed across two regimes run on one machine; absent until both exist; a planted gap is read with its sign."""
    from fedpfn.core.provenance import collect

    here = collect()
    assert gate.step_control({"cnn-same-init": planted(MOVING)})[0].startswith("Not yet read")
    smaller = on(planted({**MOVING, "plain": [0.3, 0.32, 0.31, 0.29]}, seeds=6), dict.fromkeys(range(6), here))
    lines = gate.step_control({"cnn-same-init-lr0.06": smaller,
                               "cnn-same-init": on(planted(MOVING, seeds=10), dict.fromkeys(range(10), here))})  # fmt: skip
    assert lines[0] == "Paired within one machine: 6 of the 6 seeds both regimes ran."
    assert lines[2] == "One Holm family of the 2 tests below."  # accuracies planted equal: no test
    row = next(line for line in lines if line.startswith("| shared-0.4 at lr 0.1 − plain at lr 0.06: P |"))
    assert "| 6 | -0.3" in row and "lower" in row


def test_the_step_control_drops_the_seeds_whose_two_cells_ran_on_different_machines() -> None:
    """Cells of two machines: only a seed whose two regimes ran on one machine (and one set of libraries)
    is paired; the others are dropped and the page says how many and why; with none left, not read."""
    from fedpfn.core.provenance import collect

    here = collect()
    there = {**here, "device": {**here["device"], "cpu": "Another CPU"}}
    newer = {**here, "packages": {**here["packages"], "torch": "9.9"}}
    anchored = on(planted(MOVING, seeds=6), {0: here, 1: here, 2: here, 3: here, 4: here, 5: None})
    smaller = on(planted({**MOVING, "plain": [0.3, 0.32, 0.31, 0.29]}, seeds=6),
                 {0: here, 1: here, 2: there, 3: newer, 4: here, 5: here})  # fmt: skip
    lines = gate.step_control({"cnn-same-init-lr0.06": smaller, "cnn-same-init": anchored})
    assert lines[0] == ("Paired within one machine: 3 of the 6 seeds both regimes ran; dropped: 1 (5) where a cell of "
                        "cnn-same-init recorded no machine (kept before cells carried their provenance); 2 (2, 3) where "
                        "the two cells ran on different machines or library sets.")  # fmt: skip
    row = next(line for line in lines if line.startswith("| shared-0.4 at lr 0.1 − plain at lr 0.06: P |"))
    assert "| 3 | -0.3" in row  # seeds 0, 1 and 4 alone
    apart = on(smaller, dict.fromkeys(range(6), there))
    assert gate.step_control({"cnn-same-init-lr0.06": apart, "cnn-same-init": anchored}) == [
        "Not read: no seed ran both regimes on one machine. Of the 6 seeds both ran, dropped: 1 (5) where a cell of "
        "cnn-same-init recorded no machine (kept before cells carried their provenance); 5 (0, 1, 2, 3, 4) where the "
        "two cells ran on different machines or library sets."]  # fmt: skip
    unrecorded = gate.step_control({"cnn-same-init-lr0.06": smaller, "cnn-same-init": planted(MOVING, seeds=6)})
    assert unrecorded[0].startswith("Not read: no seed ran both regimes on one machine.") and len(unrecorded) == 1


def test_a_regime_whose_p_is_zero_in_every_seed_says_so_instead_of_an_empty_interval() -> None:
    """From a trained start matching may keep the identity in every seed: P(plain) exactly 0, no spread."""
    _, found, said = gate.question_a({"r": planted({**MOVING, "plain": [0.0]}, seeds=5)})
    assert found == [] and said[0].endswith("not shown: no test: all 5 differences are exactly +0 nats.")


def test_the_figure_draws_every_regime_seed_by_seed_and_moves_with_the_cells() -> None:
    """P(plain)'s dots are the cells' own P, freezing and sharing are the seed-by-seed differences,
    a regime of one seed is left out, and a regime that reads 0 everywhere draws 0."""
    still = {arm: [0.0] for arm in ARMS[:3]} | {"diff-init": [1.0, 1.2]}
    cells = {"moving": planted(MOVING, seeds=4), "still": planted(still, seeds=5), "one": planted(MOVING, seeds=1)}
    panels = gate.figure_panels(cells)
    plain, freezing, sharing = (panels[title] for title in gate.FIGURE_PANELS)
    assert [s.label for s in plain] == ["moving (4)", "still (5)"]
    assert list(plain[0].points) == MOVING["plain"]
    assert list(freezing[0].points) == [i - p for i, p in zip(MOVING["independent-0.4"], MOVING["plain"])]
    assert list(sharing[0].points) == [s - i for s, i in zip(MOVING["shared-0.4"], MOVING["independent-0.4"])]
    assert list(plain[1].points) == [0.0] * 5 and plain[1].low is None  # every seed the same: no interval
