"""A study page in short (issue 56): `<!-- study: summary [FAMILY ...] -->` puts each named family's
differences at the page's top, a line each with its 95 % interval and verdict, the same numbers and
verdicts as the family tables below; those tables say a verdict in a few words a cell, and what the
words mean once beside each table. An unknown family in the marker is refused in one line.

The studies with readings of their own open the same way, each summary computed from the stored
results its page reads: the gate's (a) and (b), the federated study's primary family, the pilots'
rule, the fusion page's key comparisons and the earlier study's *In short*. Each is held to the
tables below it on the committed page, and moves with planted results."""

from __future__ import annotations

import re
import shutil
import tomllib
from pathlib import Path

import pytest

from fedpfn.analysis.paired_text import VERDICT_KEY
from fedpfn.cli.main import main as fedpfn

ROOT = Path(__file__).resolve().parents[2]
LINE = re.compile(r"^    - (.+): ([+-]\d+\.\d\d) \S+ \[([+-]\d+\.\d\d), ([+-]\d+\.\d\d)\]: (.+)$")


def confirm_copy(tmp_path: Path) -> tuple[str, Path]:
    """The confirmatory study, its template and stored results under tmp_path; its path and page."""
    study = next(ROOT.glob("studies/**/alignment_confirm.toml")).relative_to(ROOT)
    page = tomllib.loads((ROOT / study).read_text())["page"]
    for path in (str(study), page["template"], page["stored"]):
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / path, tmp_path / path)
    return str(study), tmp_path / page["template"]


def rows(page: str) -> list[tuple[str, str, str, str, str]]:
    """Each family table's row: the comparison, its mean and interval as the summary rounds them,
    and its verdict cell's first words."""
    found = []
    for line in page.splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if len(cells) == 7 and cells[2].startswith("["):
            low, high = map(float, cells[2].strip("[]").split(", "))
            found.append(
                (cells[0], f"{float(cells[1]):+.2f}", f"{low:+.2f}", f"{high:+.2f}", cells[6].split(";")[0])
            )
            assert len(cells[6].split()) <= 12, cells[6]  # a few words, not 35
    return found


def test_the_summary_says_what_the_tables_below_say(tmp_path: Path, monkeypatch, capsys) -> None:
    study, template = confirm_copy(tmp_path)
    text = template.read_text()
    assert "<!-- study: summary " in text.split("## Pre-registration", 1)[0]  # the page's top
    monkeypatch.chdir(tmp_path)
    assert fedpfn(["study", "page", "--stored", study]) == 0
    page = next((tmp_path / "docs").glob("alignment_confirm.md")).read_text()
    top = page.split("## Pre-registration", 1)[0]
    said = [LINE.match(line) for line in top.splitlines() if line.startswith("    - ")]
    assert said and all(said), top
    table = rows(page)
    assert all(m.groups() in table for m in said), (said, table)
    assert page.count(VERDICT_KEY) == text.count("<!-- study: family ")  # once beside each family's table


def test_an_unknown_family_in_the_summary_is_refused_in_one_line(tmp_path: Path, monkeypatch, capsys) -> None:
    study, template = confirm_copy(tmp_path)
    template.write_text("# t\n\n<!-- study: summary step nosuch -->\n")
    monkeypatch.chdir(tmp_path)
    assert fedpfn(["study", "page", "--stored", study]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "unknown marker '<!-- study: summary step nosuch -->'" in err


def table_row(page: str, *first: str) -> list[str]:
    """The cells of the one table row whose first cells are `first`."""
    found = [cells for line in page.splitlines() if line.startswith("| ")
             for cells in [[c.strip() for c in line.strip().strip("|").split("|")]] if cells[: len(first)] == list(first)]  # fmt: skip
    assert len(found) == 1, (first, found)
    return found[0]


def test_the_gates_summary_says_what_its_a_and_b_tables_say() -> None:
    """docs/alignment.md in short: (a)'s regimes where P(plain) > 0 under `full`, each with the mean and
    interval of (a)'s row, and (b)'s parts of P with the mean, interval and verdict of (b)'s rows."""
    page = (ROOT / "docs/alignment.md").read_text()
    top = page.split("## The instrument", 1)[0]
    a = re.findall(r"^- (\S+), full: P\(plain\) ([+-][\d.]+) nats, 95 % CI (\[.+?\]) over (\d+) seeds; (P\(plain\) > 0):", top, re.M)
    assert a and f"in {len(a)} of the " in top
    for name, mean, ci, seeds, reading in a:
        assert table_row(page, name, "full")[2:5] == [seeds, mean, ci] and table_row(page, name, "full")[-1] == reading
    others = re.search(r"^The others under `full`: (.+); \(a\)'s table below", top, re.M)[1].split("; ")
    named = {name: words for group in others for words, names in [re.fullmatch(r"\*(.+)\* in (.+)", group).groups()]
             for name in names.split(", ")}  # fmt: skip
    assert len(named) + len(a) == int(re.search(r"in \d+ of the (\d+) regimes run", top)[1])
    assert all(table_row(page, name, "full")[-1] == words for name, words in named.items())
    b = re.findall(r"^- (.+?): ([+-][\d.]+ nats), 95 % CI (\[.+?\]), p Holm \S+: (.+)\.$", top, re.M)
    assert len(b) == 2 * len(a)  # freezing and sharing, each regime that passed (a)
    for label, mean, ci, said in b:
        row = table_row(page, label)
        assert row[1:3] == [mean, ci] and said.startswith(row[-1].split(";")[0]), (label, row)


def test_the_gates_summary_moves_with_the_cells() -> None:
    """A regime whose plain P is planted at 0 leaves (a)'s answer, and (b) has nothing to say."""
    from studies.alignment_gate import gate
    from tests.support.gate_cells import MOVING, planted

    def short(cells: dict) -> str:
        _, found, said = gate.question_a(cells)
        return "\n".join(gate.in_short(cells, found, said, gate.question_b(cells, found)[1]))

    moving = short({"r": planted(MOVING), "q": planted({**MOVING, "plain": [0.0]})})
    assert "in 1 of the 2 regimes run" in moving and "\n- r, full: P(plain) +0.104 nats" in moving
    assert "\nThe others under `full`: *not shown (no test)* in q; " in moving
    assert "\n- r, P: sharing (shared − independent): " in moving and ": lower.\n" in moving + "\n"
    flat = short({"r": planted({**MOVING, "plain": [0.0]}), "q": planted({**MOVING, "plain": [0.0]})})
    assert "in 0 of the 2 regimes run" in flat and flat.endswith("- none tested yet.") and "\n- r, full" not in flat
    assert "\nThe others under `full`: *not shown (no test)* in r, q; " in flat


def federated_summary(page: str) -> list[tuple[str, ...]]:
    return re.findall(r"^- (.+?): ([+-][\d.]+) in R (\[.+?\]): (.+)$", page.split("## Pre-registration", 1)[0], re.M)


def test_the_federated_summary_says_what_its_primary_table_says() -> None:
    page = (ROOT / "docs/alignment_federated.md").read_text()
    said = federated_summary(page)
    assert [label for label, *_ in said] == ["FedPFN − fedavg", "FedPFN − fedpfn-client"]
    for label, mean, ci, verdict in said:
        row = table_row(page, label)
        assert row[1:3] == [mean, ci] and row[-1].split(";")[0] == verdict


def test_the_federated_summary_moves_with_the_stored_runs(tmp_path: Path) -> None:
    """FedPFN's median R planted 0.2 above FedAvg's on every seed (give or take): the summary says higher."""
    import dataclasses
    import json

    from fedpfn.study.spec import load
    from studies.alignment_federated import readings

    kept = json.loads((ROOT / "docs/alignment/federated.json").read_text())
    median = kept["figures"]["median R"]
    median["fedpfn"] = {s: v + 0.2 + 0.01 * int(s) for s, v in median["fedavg"].items()}
    (tmp_path / "federated.json").write_text(json.dumps(kept))
    declared = load(ROOT / "studies/alignment_federated/alignment_federated.toml")
    spec = dataclasses.replace(declared, page=dataclasses.replace(declared.page, stored=tmp_path / "federated.json"))
    (first, *_), committed = readings.in_short(spec)[2:], federated_summary((ROOT / "docs/alignment_federated.md").read_text())
    assert first == "- FedPFN − fedavg: +0.220 in R [+0.200, +0.240]: higher" and committed[0][3] == "not resolved"


@pytest.mark.parametrize("name", ["alignment_pilot", "alignment_pilot_cnn"])
def test_a_pilots_summary_says_what_its_rules_table_says(name: str) -> None:
    """Each finished block's line atop the pilot's page: its steps, P(plain) in rounds 1 and 5 and whether
    it qualifies, the same as its row in the rule's table; the rule's answer as the page says it below."""
    page = (ROOT / f"docs/{name}.md").read_text()
    top = page.split("\n## ", 1)[0]
    said = re.findall(r"^- (\S+) \((\d+) local steps a round\): (.+?\]) and (.+?\]); qualifies: (.+)$", top, re.M)
    assert said
    for block, steps, first, last, qualifies in said:
        row = table_row(page, block)
        assert [row[1], row[2], row[3], row[-1]] == [steps, first, last, qualifies], (block, row)
    assert ("**no regime qualified**" in top) == ("**No regime qualified**" in page.split("## Results", 1)[1])


FUSION_LINE = re.compile(r"^- (Model soups|ColD fusion), (.+?), (.+?): ([+-][\d.]+) points (\[.+?\]): (.+)$", re.M)


def test_the_fusion_summary_says_what_its_comparison_tables_say() -> None:
    """Each line atop docs/fusion.md: the comparison's mean and interval as its part's table prints them,
    and (ColD, whose page reads each comparison) the verdict its reading below says."""
    from studies.fusion.readings import KEY_METRICS

    page = (ROOT / "docs/fusion.md").read_text()
    soups, cold = page.split("## Model soups", 1)[1].split("## ColD fusion", 1)
    said = FUSION_LINE.findall(page.split("## Model soups", 1)[0])
    assert len(said) == 2 * (len(KEY_METRICS["soup"]) + len(KEY_METRICS["cold"]))
    for part, label, title, mean, ci, verdict in said:
        kind = "soup" if part == "Model soups" else "cold"
        metric = next(m for m, t in KEY_METRICS[kind].items() if t == title)
        assert table_row(soups if kind == "soup" else cold, label, metric)[2:4] == [mean, ci]
        if kind == "cold":
            assert f"\n- {label}, {title}: {mean} pp {ci}: {verdict}" in cold


def test_the_fusion_summary_moves_with_the_stored_comparisons() -> None:
    """ColD's shared − plain on its own tasks planted 5 points up on every seed (give or take) reads higher."""
    import json

    from studies.fusion.readings import in_short

    found = {kind: json.loads((ROOT / f"docs/fusion/{kind}.json").read_text()) for kind in ("soup", "cold")}
    line = "- ColD fusion, shared − plain, own tasks, own heads: "
    assert next(s for s in in_short(found) if s.startswith(line)).endswith(": not resolved")
    c = next(c for c in found["cold"]["comparisons"] if (c["label"], c["metric"]) == ("shared − plain", "own_task_acc"))
    c["diffs"] = [0.05, 0.051, 0.052]
    assert next(s for s in in_short(found) if s.startswith(line)) == line + "+5.10 points [+4.85, +5.35]: higher"


EARLIER_ENTRY = re.compile(r"(?:: |; )([^;:]+?) in \*([^*]+)\*(?: and \*[^*]+\* as [^(]+)? "
                           r"\(([+-]\d+\.\d\d) \[([+-]\d+\.\d\d), ([+-]\d+\.\d\d)\], p Holm [^)]+\)")  # fmt: skip


def test_the_earlier_summary_says_what_its_answers_say() -> None:
    """Each comparison atop docs/results_earlier.md: the difference and 95 % interval its section's answer
    prints below, grouped under the verdict the summary's one family gives it."""
    page = (ROOT / "docs/results_earlier.md").read_text()
    top, answers = page.split("\n## Answers\n", 1)
    said = [m for line in top.splitlines() if line.startswith("- ") for m in EARLIER_ENTRY.finditer(line)]
    assert len(said) == int(re.search(r"Holm over the (\d+) comparisons listed", top)[1])
    for label, heading, mean, low, high in (m.groups() for m in said):
        block = answers.split(f"- **{heading}**\n", 1)[1].split("\n- **", 1)[0]
        line = next(x for x in block.splitlines() if x.startswith(f"  - {label}: "))
        assert f": {mean} points (95 % CI {low} to {high}; " in line, (label, heading, line)
