"""docs/analysis/findings.md's bottom line: computed from the stored results, byte for byte, and
worded by what each interval and Holm p support."""

from __future__ import annotations

from pathlib import Path

from fedpfn.analysis.inference import paired
from fedpfn.study.findings import bottom_line, reading
from scripts import findings_page


def test_the_committed_bottom_line_is_what_the_stored_results_write() -> None:
    page = findings_page.PAGE.read_text()
    assert findings_page.written(page) == page


def test_a_study_without_stored_results_is_named_missing_not_guessed(tmp_path: Path) -> None:
    said = bottom_line(tmp_path)
    assert said == ["Not yet computed, for want of stored results: accuracy_beat, accuracy_control, "
                    "misalignment, freezing_or_sharing, fused_accuracy, federated."]  # fmt: skip


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
