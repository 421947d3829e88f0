"""The project's own readings write what a study file or its stored results say as typed (issue 58:
a generated page escapes everything that came from a file): an arm's label, a skew, a chosen rate,
a regime's name, why it has not run and its flags, holding `|`, `<script>`, backticks or a newline,
neither split a table's row nor become HTML or a heading (fedpfn.analysis.markup's inline and code)."""

from __future__ import annotations

import re
from pathlib import Path

from fedpfn.analysis.inference import paired
from fedpfn.cli.main import main as fedpfn
from fedpfn.study.spec import load
from studies.drift import text
from studies.drift.readings import design

HOSTILE = "a|b <script>alert(1)</script> `x`\n# heading"


def cells_of(row: str) -> int:
    """The cells a Markdown table row splits into: its `|` that no backslash escapes, less the outer two."""
    return len(re.findall(r"(?<!\\)\|", row)) - 1


def shown_as_typed(line: str) -> bool:
    """No live tag, no line break, no code span opened by the file's backtick."""
    return "<script>" not in line and "\n" not in line and "\\`x\\`" in line


def hostile_drift(tmp_path: Path) -> Path:
    """The drift study's file with FedPFN's label and the first skew hostile, at a path holding a backtick."""
    source = Path(__file__).parents[2] / "studies" / "drift" / "drift.toml"
    typed = HOSTILE.replace("\n", "\\n")
    study = tmp_path / "d`rift.toml"
    study.write_text(source.read_text().replace('fedpfn = "FedPFN"', f'fedpfn = "{typed}"')
                     .replace('alpha = ["0.1", "0.5"]', f'alpha = ["{typed}"]'))  # fmt: skip
    return study


def test_the_drift_tables_keep_a_hostile_label_skew_and_rate_in_their_cells(tmp_path: Path) -> None:
    d = design(load(hostile_drift(tmp_path)))
    assert d.alphas == (HOSTILE,) and d.names["fedpfn"] != HOSTILE
    scores = {lr: 0.5 for lr in d.lrs}
    head, _, row = text.grid_lines(d, {"grid": {HOSTILE: {"fedpfn": scores}}, "chosen": {HOSTILE: {"fedpfn": HOSTILE}}})
    assert cells_of(row) == cells_of(head) == 2 + len(d.lrs) + 1 and shown_as_typed(row), row
    test = paired(HOSTILE, "acc", {0: 0.6, 1: 0.7, 2: 0.8}, {0: 0.5, 1: 0.5, 2: 0.5})
    table = text.family_table([text.Row(HOSTILE, test, "higher")], primary=False)
    assert cells_of(table[2]) == cells_of(table[0]) == 7 and shown_as_typed(table[2]), table[2]  # its one row


def test_the_drift_design_shows_the_files_labels_and_its_path_as_typed(tmp_path: Path) -> None:
    study = hostile_drift(tmp_path)
    d = design(load(study))
    assert d.names["fedpfn"] == "a\\|b &lt;script&gt;alert(1)&lt;/script&gt; \\`x\\` \\# heading"
    assert f"``fedpfn study run {study}``" in d.lead  # a code span the path's backtick cannot close


GATE = """command = "lmc"
runs = "runs/g"
seeds = [0]
[arms]
"HOSTILE" = "--model mlp --lr `0.1`"
[not_run]
"HOSTILE" = "HOSTILE"
[page]
out = "p.md"
stored = "cells.json"
readings = "studies.alignment_gate.readings:READINGS"
text = "{regimes}\\n"
"""


def test_the_gates_regimes_table_keeps_a_hostile_regime_its_reason_and_flags_in_their_cells(tmp_path: Path,
                                                                                             monkeypatch) -> None:  # fmt: skip
    monkeypatch.chdir(tmp_path)
    (tmp_path / "g.toml").write_text(GATE.replace("HOSTILE", HOSTILE.replace("\n", "\\n")))
    (tmp_path / "cells.json").write_text("{}")
    assert fedpfn(["study", "page", "--stored", "g.toml", "--trust-code"]) == 0
    head, _, row, *rest = (tmp_path / "p.md").read_text().splitlines()
    assert cells_of(head) == cells_of(row) == 3 and shown_as_typed(row), row
    assert row.endswith("| `` --model mlp --lr `0.1` `` |")  # the flags as one code span, as typed


FIGURE = """title = "TITLE"
runs = "runs/f"
seeds = [0, 1]
shared = "--dataset fmnist --model mlp --num-clients 100 --clients-per-round 2 --rounds 1 --partition iid"
[arms]
a = "--algorithm fedavg"
[endpoints.acc]
metric = "test_accuracy"
[page]
out = "p.md"
stored = "p.json"
text = "<!-- study: arms-figure acc -->\\n"
"""


def test_a_figures_alt_text_from_the_study_title_is_shown_as_typed(tmp_path: Path, monkeypatch) -> None:
    """Every figure's line is one image whose alt text (the study's title in it) neither closes the
    image early nor holds a live tag (fedpfn.analysis.markup.image)."""
    import json

    monkeypatch.chdir(tmp_path)
    title = "x](javascript:alert(1)) <img src=x onerror=y> ![z"
    (tmp_path / "f.toml").write_text(FIGURE.replace("TITLE", title))
    (tmp_path / "p.json").write_text(json.dumps({"study": "f.toml", "chosen": None, "cells": [
        {"arm": "a", "point": {}, "seed": seed, "folder": f"runs/f/a/s{seed}", "command": "fedpfn run", "endpoints": {"acc": acc}}
        for seed, acc in ((0, 0.5), (1, 0.6))]}))  # fmt: skip
    assert fedpfn(["study", "page", "--stored", "f.toml"]) == 0
    (line,) = [line for line in (tmp_path / "p.md").read_text().splitlines() if line.startswith("![")]
    found = re.fullmatch(r"!\[((?:\\.|[^\]\\])*)\]\(([^()\s]+)\)", line)
    assert found is not None and "<img" not in found[1] and found[2] == "p-arms-acc.png", line
