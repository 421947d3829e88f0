"""docs/analysis/findings.md's bottom line: computed from the stored results, byte for byte, and
worded by what each interval and Holm p support."""

from __future__ import annotations

from pathlib import Path

from fedpfn.analysis.inference import paired
from fedpfn.study.findings import bottom_line, pilot, reading
from scripts import findings_page


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

    from fedpfn.study.findings import misalignment

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
