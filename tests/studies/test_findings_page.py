"""docs/analysis/findings.md's bottom line: computed from the stored results, byte for byte, and
worded by what each interval and Holm p support."""

from __future__ import annotations

from pathlib import Path

from fedpfn.analysis.inference import paired
from scripts import findings_page
from studies.findings import headline
from studies.findings.findings import bottom_line, pilot, reading
from studies.findings.headline import MOST_WORDS


def test_the_committed_bottom_line_is_what_the_stored_results_write() -> None:
    page = findings_page.PAGE.read_text()
    assert findings_page.written(page) == page


def test_a_study_without_stored_results_is_named_missing_not_guessed(tmp_path: Path) -> None:
    said = bottom_line(tmp_path)
    assert said == ["Not yet computed, for want of stored results: accuracy_beat, accuracy_control, "
                    "misalignment, freezing_or_sharing, fused_accuracy, federated, pilot, main_study, confirm_study, "
                    "skewed_study."]  # fmt: skip


def comparison(shift: float, holm: float | None) -> object:
    base = {s: 0.5 + 0.01 * ((s * 7) % 5) for s in range(10)}
    p = paired("x", "acc", {s: v + shift + 0.002 * (-1) ** s for s, v in base.items()}, base, 1.0)
    p.p_holm = holm
    return p


def test_the_wording_follows_the_interval_and_holm() -> None:
    assert reading(comparison(0.05, 0.001), 100, "points").startswith("higher")
    assert reading(comparison(-0.05, 0.001), 100, "points").startswith("lower")  # the sign: arm − reference
    assert reading(comparison(0.05, 0.2), 100, "points").startswith("the interval excludes 0, but 10 seeds")
    assert reading(comparison(0.0, 1.0), 100, "points").startswith("not resolved: the interval excludes gains above")


def test_the_pilot_sentence_says_what_its_rule_picked_or_that_nothing_qualified(tmp_path: Path) -> None:
    """Read from the pilots' stored results: round 1 against the last round, and the pick (None: nothing met
    the rule); the CNN pilot joins the sentence once it has a finished block."""
    import json

    block = lambda p1, p5: {"runs": {"plain": {"0": {"P_r1": p1, "P_last": p5}, "1": {"P_r1": p1, "P_last": p5}}}}  # noqa: E731
    stored = {"blocks": {"r114/lr0.1": block(0.04, 0.0), "r375/lr0.1": block(0.08, 0.001), "r24/lr0.1": block(9.0, 9.0)},
              "finished": ["r114/lr0.1", "r375/lr0.1"], "pick": None}  # fmt: skip
    (tmp_path / "docs" / "alignment").mkdir(parents=True)
    (tmp_path / "docs" / "alignment" / "pilot.json").write_text(json.dumps(stored))
    said = pilot(tmp_path)
    assert "was +0.0400 to +0.0800 nats in round 1" in said and "+0.0000 to +0.0010 nats at the last round" in said
    assert "2 blocks of local steps and learning rate, 2 seeds each; no block met its rule)" in said  # r24 unfinished
    assert said.endswith("so no federated regime was found where clients stay misaligned.") and "CNN" not in said
    cnn = {"blocks": {"r114/lr0.1": block(0.1, -0.00001)}, "finished": ["r114/lr0.1"], "pick": None}
    (tmp_path / "docs" / "alignment" / "pilot-cnn.json").write_text(json.dumps(cnn))
    said = pilot(tmp_path)
    assert "+0.1000 nats in round 1, from the random start, and +0.0000 nats at the last round" in said
    assert "on the CNN (docs/alignment_pilot_cnn.md; 1 block of local steps and learning rate, 2 seeds; no block" in said
    stored["pick"] = "r114/lr0.1"
    (tmp_path / "docs" / "alignment" / "pilot.json").write_text(json.dumps(stored))
    said = pilot(tmp_path)
    assert "its rule picked r114/lr0.1)" in said and "no federated regime was found" not in said


def test_a_plain_setting_measured_again_by_a_regime_of_other_anchors_is_named_as_such(tmp_path: Path) -> None:
    """The neuron and ratio regimes rerun the plain arm of cnn-same-init: the sentence says whose cells it
    read, names one set of runs that several regimes share once, keeps apart settings whose figures
    happen to be equal (P exactly 0 at two learning rates), and marks a regime whose positive control
    did not move as void."""
    import json

    from studies.findings.findings import misalignment

    config = {"model": "cnn", "split": "same-data", "start": "init", "lr": 0.1, "granularity": "weight"}
    def regime(p: list[float], control: tuple[float, ...] = (0.5, 0.6, 0.7, 0.8, 0.9), **changed: object) -> dict:
        seeds = {str(s): {"plain": {"permutation_loss": v}, "diff-init": {"permutation_loss": c}}
                 for s, (v, c) in enumerate(zip(p, control))}  # fmt: skip
        return {"config": {**config, **changed}, "seeds": seeds}
    rerun = [0.1, 0.3, 0.2, 0.2, 0.0]
    cells = {"cnn-same-init": regime([0.3, 0.4, 0.2, 0.35, 0.25]),
             "cnn-same-init-neuron": regime(rerun, granularity="neuron"), "cnn-same-init-r0.1": regime(rerun),
             "cnn-lr0.01": regime([0.0] * 5, lr=0.01), "cnn-lr0.03": regime([0.0] * 5, lr=0.03),
             "resnet20-same-init": regime([0.0] * 5, (0.5, -0.5, 0.6, -0.6, 0.0), model="resnet20")}  # fmt: skip
    (tmp_path / "docs/alignment").mkdir(parents=True)
    (tmp_path / "docs/alignment/cells.json").write_text(json.dumps(cells))
    said = misalignment(tmp_path)
    assert said is not None and said.count("CNN, the same data, one random start, lr 0.1") == 2
    assert "again in other runs: the plain arm of cnn-same-init-neuron and cnn-same-init-r0.1;" in said
    assert "plain arm of cnn-same-init;" not in said
    assert "lr 0.01; the same in every seed" in said and "lr 0.03; the same in every seed" in said
    assert ("+0.000 nats (ResNet-20, the same data, one random start, lr 0.1; the same in every seed, 5 seeds; "
            "void: its positive control did not move under this matching)") in said  # fmt: skip
    assert said.count("void") == 1  # the CNN regimes' controls moved


def test_the_readme_opens_with_the_committed_finding_in_one_short_sentence_and_six_rows() -> None:
    readme = findings_page.README.read_text()
    assert findings_page.readme_written(readme) == readme
    block = readme.split(findings_page.FINDING[0])[1].split(findings_page.FINDING[1])[0]
    assert block in findings_page.PAGE.read_text()  # the same finding opens docs/analysis/findings.md
    sentence, _, table = block.strip().partition("\n\n")
    assert sentence.startswith("**") and len(sentence.split()) <= MOST_WORDS
    rows = table.splitlines()[2:]
    assert 1 <= len(rows) <= 6 and all(row.count("|") == 6 for row in rows)
    assert readme.index(findings_page.FINDING[0]) < readme.index("## Two commands")  # near the top


def planted(tmp_path: Path, shift: float, sharing: float) -> Path:
    """A copy of the stored results the finding reads, FedPFN's accuracy moved by `shift` in every test
    against FedAvg (and its differences in the drift study's reports), and by `sharing` more against the control."""
    import json
    import shutil

    root = findings_page.ROOT
    for path in ("studies/drift/drift.toml", "studies/alignment_confirm/alignment_confirm.toml", "studies/alignment_confirm/alignment_confirm_a01.toml"):
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(root / path, tmp_path / path)
    moved = {"docs/alignment/confirm.json": ("fedpfn", "fedpfn-client"),
             "docs/alignment/confirm-a01.json": ("fedpfn-lr003", "fedpfn-client-lr003")}  # fmt: skip
    for path, (arm, control) in moved.items():
        stored = json.loads((root / path).read_text())
        for cell in stored["cells"]:
            cell["endpoints"]["acc"] += shift + sharing if cell["arm"] == arm else shift if cell["arm"] == control else 0
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(json.dumps(stored))
    for report in root.glob("docs/study/drift-mlp-*/report.json"):
        result = json.loads(report.read_text())
        for p in result["paired"]:
            p["diffs"] = [d + shift for d in p["diffs"]]
        (tmp_path / report.relative_to(root)).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / report.relative_to(root)).write_text(json.dumps(result))
    return tmp_path


def test_the_finding_is_the_stored_results_reading_and_turns_with_them(tmp_path: Path) -> None:
    """The committed results read 'Seldom' (1 of 4 higher); planted results turn the answer and its why."""
    now = headline.rows(findings_page.ROOT)
    assert now is not None and headline.sentence(now).startswith("Seldom: against FedAvg at its better step, FedPFN was "
                                                                  "higher in 1 (+0.16 points [+0.08, +0.24]) and not resolved in 3 of 4")  # fmt: skip
    better = headline.rows(planted(tmp_path / "up", 0.05, 0.05))
    assert better is not None
    said = headline.sentence(better)
    assert said.startswith("Yes: against FedAvg at its better step, FedPFN was higher in 4 of 4 pre-registered tests;")
    assert "it keeps its gain over FedAvg at lr 0.1" in said and "sharing anchors changes +5." in said
    assert len(said.split()) <= MOST_WORDS
    worse = headline.rows(planted(tmp_path / "down", -0.2, 0.0))
    assert worse is not None
    said = headline.sentence(worse)
    assert said.startswith("No, it did worse: against FedAvg at its better step, FedPFN was lower in 4 of 4 pre-registered")
    assert "it does not beat FedAvg even at the same step" in said
    assert headline.rows(tmp_path / "empty") is None and headline.finding(tmp_path / "empty")[0].startswith("Not yet")
