"""The federated alignment study as a declared study (studies/alignment_federated/alignment_federated.toml, its page's
reading studies.alignment_federated.readings): from synthetic finished cells the page is written and
comes out the same from its stored file alone; and the committed docs/alignment_federated.md is
what `fedpfn study page --stored studies/alignment_federated/alignment_federated.toml --trust-code` writes, byte for byte.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

from fedpfn.cli.main import main as fedpfn
from fedpfn.cli.study import configure, trust_code
from fedpfn.study import page
from fedpfn.study.cells import config_of, main_cells
from fedpfn.study.spec import load

ROOT = Path(__file__).parents[2]
GAIN = {"fedavg": 0.0, "fedpfn": 0.05, "fedpfn-fixed": 0.04, "fedpfn-client": 0.01}  # planted on R


def write_cell(folder: Path, config: dict, arm: str, seed: int) -> None:
    """A finished cell as a run leaves it: R, P and moved units every 2nd round, clients' sizes."""
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps(config))
    rows = []
    for r in range(1, 21):
        row = {"round": r, "test_accuracy": 0.6 + 0.01 * r + 0.001 * seed}
        if r % 2 == 0:
            row |= {"align_retained_fraction": 0.5 + GAIN[arm] + 0.01 * ((seed * 3 + r) % 5),
                    "align_permutation_loss": 0.001 * (seed + 1) * (1 + GAIN[arm]), "align_moved_fraction": 0.002}  # fmt: skip
        rows.append(row)
    (folder / "metrics.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    (folder / "clients.jsonl").write_text("".join(json.dumps({"num_examples": 600 + 7 * i}) + "\n" for i in range(5)))
    (folder / "summary.json").write_text(json.dumps({"wall_seconds": 1.0, "rounds": 20}))


def test_the_page_from_cells_is_the_page_from_its_stored_file(tmp_path: Path) -> None:
    declared = load(ROOT / "studies" / "alignment_federated" / "alignment_federated.toml")
    trust_code(declared, "page", True, stored=True)  # its readings are the study's own code: --trust-code
    (tmp_path / "template.md").write_text("# Federated\n\n<!-- study: alignment_federated -->\n")
    (tmp_path / "kept").mkdir()
    shutil.copy(ROOT / "docs" / "alignment" / "cells.json", tmp_path / "kept" / "cells.json")  # the gate's steps
    where = dataclasses.replace(declared.page, out=tmp_path / "page.md", template=tmp_path / "template.md",
                                stored=tmp_path / "kept" / "federated.json")  # fmt: skip
    spec = dataclasses.replace(declared, runs=tmp_path / "runs", page=where)
    for cell in main_cells(spec):
        write_cell(cell.folder, config_of(spec, cell, configure).to_dict(), cell.arm, cell.seed)
    page.write(spec, configure)
    text = (tmp_path / "page.md").read_text()
    stored = json.loads((tmp_path / "kept" / "federated.json").read_text())
    assert list(stored["figures"]["median R"]) == list(spec.arms) and stored["steps_per_round"] == 3 * 10  # ceil(614/64) x 3
    assert text.startswith(f"# Federated\n\n## Results\n\nWritten by `fedpfn study page {spec.path} --trust-code` from 20 runs under ")
    assert "| FedPFN − fedavg | +0.050 |" in text and "a client here took 30 steps a round" in text
    (tmp_path / "page.md").unlink()
    shutil.rmtree(tmp_path / "runs")  # where the runs are not: the same page from the stored file
    page.write(spec, configure, from_stored=True)
    assert (tmp_path / "page.md").read_text() == text


def test_the_committed_page_is_what_the_declared_study_writes_from_its_stored_results(tmp_path: Path, monkeypatch, capsys) -> None:
    """docs/alignment_federated.md is `fedpfn study page --stored` on docs/alignment/federated.json, byte for byte."""
    for path in ("studies/alignment_federated/alignment_federated.toml", "studies/alignment_federated/alignment_federated.md", "docs/alignment/federated.json",
                 "docs/alignment/cells.json"):  # fmt: skip
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_bytes((ROOT / path).read_bytes())
    monkeypatch.chdir(tmp_path)
    assert fedpfn(["study", "page", "--stored", "studies/alignment_federated/alignment_federated.toml", "--trust-code"]) == 0
    assert capsys.readouterr().out == "wrote docs/alignment_federated.md\n"
    assert (tmp_path / "docs" / "alignment_federated.md").read_bytes() == (ROOT / "docs" / "alignment_federated.md").read_bytes()


def test_the_figure_draws_every_median_r_comparison_seed_by_seed_as_stored(tmp_path: Path) -> None:
    """The figure's dots are the stored runs' median R differences, seed by seed (the primary family,
    then median R's secondary comparisons), its means and intervals the tables'; they move with the file."""
    from studies.alignment_federated import readings as reading

    declared = load(ROOT / "studies" / "alignment_federated" / "alignment_federated.toml")
    spec = dataclasses.replace(declared, page=dataclasses.replace(declared.page, out=tmp_path / "page.md",
                                                                  stored=tmp_path / "kept" / "federated.json"))  # fmt: skip
    median = {arm: {int(s): v for s, v in seeds.items()}
              for arm, seeds in json.loads((ROOT / "docs/alignment/federated.json").read_text())["figures"]["median R"].items()}  # fmt: skip
    table = {"median R": median}
    primary, secondary = reading.comparisons(table)
    panels = reading.figure_panels(primary, secondary)
    drawn = {s.label: list(s.points) for series in panels.values() for s in series}
    pairs = {"FedPFN − fedavg": ("fedpfn", "fedavg"), "FedPFN − fedpfn-client": ("fedpfn", "fedpfn-client"),
             "fedpfn-fixed − fedpfn": ("fedpfn-fixed", "fedpfn"), "fedpfn-client − fedavg": ("fedpfn-client", "fedavg")}
    assert drawn == {label: [median[a][s] - median[b][s] for s in range(5)] for label, (a, b) in pairs.items()}
    first = panels["primary family: median R"][0]
    assert (first.mean, first.low, first.high) == (primary[0].mean, primary[0].low, primary[0].high)
    median["fedavg"][3] -= 1.0  # the stored figure moves: FedPFN − FedAvg on seed 3 with it
    moved = reading.figure_panels(*reading.comparisons(table))["primary family: median R"][0]
    assert moved.points[3] == drawn["FedPFN − fedavg"][3] + 1.0
    line = reading.figure(spec, primary, secondary)[0]
    assert line.endswith("(kept/federated-median-R.png)")
    assert (tmp_path / "kept/federated-median-R.png").read_bytes().startswith(b"\x89PNG")
