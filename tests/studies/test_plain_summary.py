"""A study page without comparisons in short (issue 56): `<!-- study: summary -->` in a study with no
`[families]` opens its page with each arm's endpoints as the arms table below gives them, beside the
baseline's with the difference, and what its seeds allow: one seed, no interval and no spread to
plan seeds from; more seeds, each difference's spread and the seeds it would need. The privacy page
(one seed an arm) is held to its table, and its summary moves with planted stored results; `fedpfn
seeds-needed` refuses such a study in one line."""

from __future__ import annotations

import json
import re
import shutil
import tomllib
from pathlib import Path
from typing import Any

from fedpfn.analysis.plan import seeds_needed
from fedpfn.cli.main import main as fedpfn

ROOT = Path(__file__).resolve().parents[2]
STUDY = "studies/privacy/privacy.toml"
PART = re.compile(r"^(\S+) (\S+(?: ± \S+)?|∞ \(no noise\)|—)(?: [a-z-]+)?(?: \((.+?) (\S+(?: ± \S+)?): ([+-][\d.]+)(.*)\))?$")


def arms_rows(page: str) -> tuple[list[str], dict[tuple[str, str], list[str]]]:
    """The arms table: its endpoint names, and each (arm, axes) row's endpoint cells."""
    lines = [line for line in page.splitlines() if line.startswith("| ")]
    head = [c.strip().split(" (")[0] for c in lines[0].strip("|").split("|")]
    assert head[:3] == ["arm", "axes", "seeds"], head
    rows = {}
    for line in lines[1:]:  # the rule line "|---|" is not among them
        cells = [c.strip() for c in line.strip("|").split("|")]
        rows[cells[0], cells[1]] = cells[2:]
    return head[3:], rows


def summary_lines(page: str) -> dict[tuple[str, str], list[re.Match[str]]]:
    """Each (arm, axes) line of the summary atop the page, its endpoints parsed."""
    top = page.split("\n## In short\n", 1)[1].split("\nWritten by ", 1)[0]
    found, point = {}, ""
    for line in top.splitlines():
        if line.startswith("- "):
            point = line[2:]
        elif line.startswith("    - "):
            label, said = line[6:].split(": ", 1)
            parts = re.split(r", (?![^(]*\))", said)  # the commas outside parentheses
            found[label, point] = [PART.match(part) for part in parts]
            assert all(found[label, point]), (line, parts)
    return found


def test_the_privacy_summary_says_what_its_arms_table_says() -> None:
    page = (ROOT / "docs/guide/privacy-results.md").read_text()
    names, rows = arms_rows(page)
    said = summary_lines(page)
    assert len(said) == len(rows) - 2 == 4  # every arm but no noise, at fedavg and fedpfn
    for (label, point), parts in said.items():
        assert rows[label, point][0] == "1"  # one seed
        base = rows["no noise", point][1:]
        for name, part, cell, theirs in zip(names, parts, rows[label, point][1:], base, strict=True):
            assert part[1] == name and part[2] == cell, (label, point, name)
            if part[3] is not None:  # beside no noise's own cell, with the difference of the two
                assert (part[3], part[4], part[6]) == ("no noise", theirs, "")
                assert abs(float(part[5]) - (float(cell) - float(theirs))) < 0.0101
    assert [p[5] for p in said["z = 2.0", "algorithm=fedavg"][:2]] == ["-74.22", "-75.92"]
    assert "\nOne seed an arm: each difference is one run's, with no interval, and one seed gives no spread" in page


def privacy_copy(tmp_path: Path) -> Path:
    """The privacy study, its template and stored results under tmp_path; the stored file's path."""
    page = tomllib.loads((ROOT / STUDY).read_text())["page"]
    for path in (STUDY, page["template"], page["stored"]):
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / path, tmp_path / path)
    return tmp_path / page["stored"]


def written(tmp_path: Path, stored: Path, data: dict[str, Any], monkeypatch) -> str:
    stored.write_text(json.dumps(data))
    monkeypatch.chdir(tmp_path)
    assert fedpfn(["study", "page", "--stored", STUDY]) == 0
    return (tmp_path / "docs/guide/privacy-results.md").read_text()


def test_a_planted_result_moves_the_summary(tmp_path: Path, monkeypatch, capsys) -> None:
    """FedPFN at z = 0.5 planted at 80 % final accuracy: its line says 80.00 and -5.50 from no noise's 85.50."""
    stored = privacy_copy(tmp_path)
    data = json.loads(stored.read_text())
    cell = next(c for c in data["cells"] if c["arm"] == "0.5" and c["point"] == {"algorithm": "fedpfn"})
    cell["endpoints"]["final"] = 0.80
    page = written(tmp_path, stored, data, monkeypatch)
    (final, *_) = summary_lines(page)["z = 0.5", "algorithm=fedpfn"]
    assert final.groups()[:5] == ("final", "80.00", "no noise", "85.50", "-5.50")
    assert "| z = 0.5 | algorithm=fedpfn | 1 | 80.00 |" in page


def test_a_second_seed_gives_each_difference_its_spread_and_the_seeds_it_needs(tmp_path: Path, monkeypatch,
                                                                                capsys) -> None:  # fmt: skip
    """Every cell run again as seed 1, FedAvg at z = 0.5 2 points lower there: its final difference is the
    mean of -10.11 and -12.11 with their std, and the seeds a paired t test would need for it."""
    stored = privacy_copy(tmp_path)
    data = json.loads(stored.read_text())
    again = [json.loads(json.dumps({**c, "seed": 1})) for c in data["cells"]]
    moved = next(c for c in again if c["arm"] == "0.5" and c["point"] == {"algorithm": "fedavg"})
    moved["endpoints"]["final"] -= 0.02
    page = written(tmp_path, stored, {**data, "cells": data["cells"] + again}, monkeypatch)
    (final, last5, *_) = summary_lines(page)["z = 0.5", "algorithm=fedavg"]
    std = 2 / 2**0.5
    assert final.groups() == ("final", "74.56 ± 1.41", "no noise", "85.67 ± 0.00", "-11.11",
                              f", std 1.41 over 2 seeds: {seeds_needed(std, 11.11)} seeds to resolve it")  # fmt: skip
    assert last5[6] == ", std 0.00 over 2 seeds: 2 seeds to resolve it"  # the same difference on both seeds
    assert "One seed an arm" not in page and "\nThe study declares no comparison (`[families]`): no difference" in page


def test_seeds_needed_refuses_a_study_without_comparisons_in_one_line(capsys) -> None:
    """`fedpfn seeds-needed` plans from a study's declared families: the privacy study has none, so it
    says so and exits 2 rather than printing a plan with no comparison in it."""
    assert fedpfn(["seeds-needed", str(ROOT / STUDY), "--difference", "5"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err == f"error: {ROOT / STUDY}: declares no comparison ([families]) to plan from\n"
