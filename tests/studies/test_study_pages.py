"""The pages written by declared studies from their stored results alone: each committed page is
what `fedpfn study page --stored STUDY` writes, byte for byte (studies/privacy/privacy.toml,
studies/attacks/attacks.toml, studies/earlier/earlier.toml, studies/alignment_pilot/alignment_pilot.toml, ...), and the study
format's keys these pages need (an endpoint's `format` and `absent`, the privacy metrics) are
checked before any run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fedpfn.cli.main import main as fedpfn

ROOT = Path(__file__).parents[2]
EARLIER = ("main-a0.1", "main-a0.5", "schedule", "server-fedavgm", "server-fedadam", "fedpnu-ratios", "anchors-fedavgm",
           "anchors-fedadam")  # the earlier study's reports, each kept in docs/study/<section>/  # fmt: skip
PAGES = {  # study -> (the page it writes, what it reads: its template, its stored results, ...)
    "privacy": ("docs/guide/privacy-results.md", "studies/privacy/privacy.md", "docs/study/privacy.json"),
    "attacks": ("docs/guide/attacks-results.md", "studies/attacks/attacks.md", "docs/study/attacks.json"),
    "alignment_main": ("docs/alignment_main.md", "studies/alignment_main/alignment_main.md", "docs/alignment/main.json"),
    "alignment_confirm": ("docs/alignment_confirm.md", "studies/alignment_confirm/alignment_confirm.md", "docs/alignment/confirm.json"),
    "alignment_confirm_a01": ("docs/alignment_confirm_a01.md", "studies/alignment_confirm/alignment_confirm_a01.md",
                              "docs/alignment/confirm-a01.json"),
    "alignment_pilot": ("docs/alignment_pilot.md", "studies/alignment_pilot/alignment_pilot.md", "docs/alignment/pilot.json"),
    "alignment_pilot_cnn": ("docs/alignment_pilot_cnn.md", "studies/alignment_pilot/alignment_pilot_cnn.md", "docs/alignment/pilot-cnn.json"),
    "earlier": ("docs/results_earlier.md", "studies/earlier/earlier.md", "docs/study/earlier-page.json",
                *(f"docs/study/{name}/report.{kind}" for name in EARLIER for kind in ("json", "md"))),
    "pilot": ("docs/cnn_federation_pilot.md", "studies/cnn_federation/pilot.md", "docs/study/cnn-pilot.json"),
    "soup": ("docs/fusion.md", "studies/fusion/fusion.md", "docs/fusion/soup.json", "docs/fusion/cold.json"),  # either study
    "cold": ("docs/fusion.md", "studies/fusion/fusion.md", "docs/fusion/soup.json", "docs/fusion/cold.json"),  # writes it all
}


@pytest.mark.parametrize("name", list(PAGES))
def test_the_committed_page_is_what_its_study_writes_from_its_stored_results(name: str, tmp_path: Path, monkeypatch,
                                                                            capsys) -> None:  # fmt: skip
    """A copy holding only the study, its template and its stored files writes the committed page."""
    page, *read = PAGES[name]
    study = str(next(ROOT.glob(f"studies/**/{name}.toml")).relative_to(ROOT))  # its folder's, or studies/'s
    for path in (study, *read):
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_bytes((ROOT / path).read_bytes())
    monkeypatch.chdir(tmp_path)
    assert fedpfn(["study", "page", "--stored", study, "--trust-code"]) == 0
    assert capsys.readouterr().out == f"wrote {page}\n"
    assert (tmp_path / page).read_bytes() == (ROOT / page).read_bytes()


def test_only_a_page_published_under_the_former_rule_lists_the_verdicts_the_rule_turned(tmp_path: Path, monkeypatch,
                                                                                       capsys) -> None:  # fmt: skip
    """The attacks page was published while the exact test decided up to 5 seeds (its study file says
    `changed_verdicts = true`): it ends with the verdicts the one rule turned; the same study without
    the key writes the same page without that list."""
    from fedpfn.analysis.paired_text import CHANGED

    page, *read = PAGES["attacks"]
    study = "studies/attacks/attacks.toml"
    for path in (study, *read):
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_bytes((ROOT / path).read_bytes())
    text = (ROOT / study).read_text()
    assert "\nchanged_verdicts = true" in text
    (tmp_path / study).write_text(text.replace("\nchanged_verdicts = true", "\n"))
    monkeypatch.chdir(tmp_path)
    assert fedpfn(["study", "page", "--stored", study]) == 0
    committed, written = (ROOT / page).read_text(), (tmp_path / page).read_text()
    assert f"\n{CHANGED}\n" in committed and CHANGED not in written
    assert committed.startswith(written.rstrip("\n"))


ARMS = "[arms]\na = '--algorithm fedavg'\nb = '--algorithm fedpfn'\n"
BAD = {
    "format": (ARMS + "[endpoints.eps]\nmetric = 'dp_epsilon'\nformat = '.2d'",
               "endpoints.eps.format = '.2d' is not a number's format spec (e.g. \".2f\", \".3g\", \"g\")"),
    "absent": (ARMS + "[endpoints.eps]\nmetric = 'dp_epsilon'\nabsent = 3", "endpoints.eps.absent = 3 is not a string"),
}  # fmt: skip


@pytest.mark.parametrize("case", list(BAD))
def test_a_bad_endpoint_key_is_one_line_and_exit_2(case: str, tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "bad.toml").write_text(BAD[case][0])
    assert fedpfn(["study", "status", "bad.toml"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err == f"error: study: bad.toml: {BAD[case][1]}\n"
    assert not (tmp_path / "runs").exists()


def test_an_absent_endpoint_is_said_as_declared_and_a_present_one_in_its_format(tmp_path: Path) -> None:
    """A run without the metric stores null and the arms table says the declared text; others use `format`."""
    from fedpfn.study import page
    from fedpfn.study.spec import load

    (tmp_path / "s.toml").write_text(ARMS + "[endpoints.eps]\nmetric = 'dp_epsilon'\nformat = '.3g'\nabsent = 'no noise'\n")
    spec = load(tmp_path / "s.toml")
    for arm, rows in (("a", [{"round": 1}]), ("b", [{"round": 1, "dp_epsilon": 12.3456}])):
        folder = tmp_path / arm
        folder.mkdir()
        (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    values = {arm: page.endpoint_value(spec, tmp_path / arm, "eps") for arm in ("a", "b")}
    assert values == {"a": None, "b": 12.3456}
    stored = {"cells": [{"arm": arm, "point": {}, "seed": 0, "endpoints": {"eps": v}} for arm, v in values.items()]}
    assert page.arms_table(spec, stored)[2:] == ["| a | 1 | no noise |", "| b | 1 | 12.3 |"]


def test_a_family_on_an_endpoint_a_run_may_lack_pairs_the_seeds_where_both_arms_have_it(tmp_path: Path) -> None:
    """A diverged run has no alignment figure: its seed leaves the comparison, and the count says so."""
    from fedpfn.study import page
    from fedpfn.study.spec import load

    (tmp_path / "s.toml").write_text(ARMS + "[endpoints.p]\nmetric = 'align_permutation_loss'\nabsent = 'diverged'\n"
                                     "[families.f]\nendpoint = 'p'\n")  # fmt: skip
    spec = load(tmp_path / "s.toml")
    values = {"a": {0: 0.1, 1: 0.2, 2: 0.3, 3: 0.4}, "b": {0: 0.5, 1: None, 2: 0.7, 3: 0.9}}
    stored = {"cells": [{"arm": arm, "point": {}, "seed": s, "endpoints": {"p": v}}
                        for arm, seeds in values.items() for s, v in seeds.items()]}  # fmt: skip
    (row,) = page.family_rows(spec, stored, "f")
    assert row.seeds == [0, 2, 3] and row.mean == pytest.approx((0.4 + 0.4 + 0.5) / 3)  # b − a on seeds 0, 2, 3
