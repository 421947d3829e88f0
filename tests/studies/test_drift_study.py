"""The drift study as a declared study (studies/drift/drift.toml, its page's reading studies.drift.readings)
on synthetic runs with planted effects: the answers it writes under the pre-registration say what
the numbers support, the page comes out the same from what it stored as from the runs, nothing
is written while a run is unfinished; and the committed docs/results.md is what
`fedpfn study page --stored studies/drift/drift.toml --trust-code` writes, byte for byte.

The cells are written as a run writes them (config.json with the study's own settings,
metrics.jsonl, summary.json last), so the page is tested without training anything.
"""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest

from fedpfn.analysis.paired_text import VERDICT_KEY
from fedpfn.cli.main import main as fedpfn
from fedpfn.cli.study import configure, trust_code
from fedpfn.study import page
from fedpfn.study.cells import choices, config_of, main_cells, merged, tuning_cells
from fedpfn.study.spec import Spec, StudyError, load
from studies.drift import readings as drift
from studies.drift import text as drift_text

ROOT = Path(__file__).parents[2]
ROUNDS = 20
NOISE = (0.004, -0.003, 0.001, -0.002, 0.0)  # small next to the planted effects, summing to 0
# Planted, per arm: accuracy over FedAvg's, loss barrier, fusion gap. FedPFN is 3 points above
# FedAvg with a barrier 0.05 lower; the control differs from FedPFN only by the noise. FedPNU
# uploads less (UPLOAD), so the arms that upload as much as FedAvg are FedPFN's three.
PLANTED = {
    "fedavg": (0.0, 0.10, 0.05), "fedpfn": (0.03, 0.05, 0.05), "fedpfn-fixed": (0.01, 0.05, 0.05),
    "fedpfn-client": (0.03, 0.05, 0.05), "fedpnu-weight": (-0.02, 0.1, 0.05), "fedpnu-neuron": (-0.04, 0.1, 0.05),
}  # fmt: skip
UPLOAD = {"fedpnu-weight": 600, "fedpnu-neuron": 600}  # bytes a round; every other arm 1000
PREREG = "# Results\n\n## Pre-registration\n\nThe design, as written before the runs.\n\n"


def write_run(folder: Path, config: dict[str, Any], rows: list[dict[str, Any]]) -> None:
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps(config))
    (folder / "metrics.jsonl").write_text("".join(json.dumps({"round": r, **row}) + "\n" for r, row in enumerate(rows, 1)))
    (folder / "summary.json").write_text(json.dumps({"wall_seconds": 1.0, "rounds": len(rows)}))


def main_rows(arm: str, seed: int) -> list[dict[str, Any]]:
    gain, barrier, gap = PLANTED[arm]
    noise = NOISE[(seed + list(PLANTED).index(arm)) % len(NOISE)]  # each arm its own: no difference is exact
    rows = []
    for r in range(1, ROUNDS + 1):
        acc = 0.5 + 0.01 * r + 0.01 * seed + gain + noise
        row = {"test_accuracy": acc, "test_loss": 1 - acc, "train_loss": 1 / r, "bytes_up": UPLOAD.get(arm, 1000), "bytes_down": 1000,
               "num_clients": 10, "num_failures": 0}  # fmt: skip
        if r % 10 == 0:
            row |= {"align_loss_barrier": barrier + noise, "align_fusion_gap": gap + noise}
        rows.append(row)
    return rows


@pytest.fixture
def spec(tmp_path: Path) -> Spec:
    """studies/drift/drift.toml with its runs and page in tmp_path: every grid run (lr 0.05 scores best,
    0.1 collapses) and every main run, each with the study's own settings."""
    declared = load(ROOT / "studies" / "drift" / "drift.toml")
    trust_code(declared, "page", True, stored=True)  # its readings are the study's own code: --trust-code
    (tmp_path / "template.md").write_text(PREREG + "<!-- study: drift -->\n")
    where = dataclasses.replace(declared.page, out=tmp_path / "results.md", template=tmp_path / "template.md",
                                stored=tmp_path / "figures" / "drift-mlp-page.json")  # fmt: skip
    shared = merged(declared.shared, ["--rounds", str(ROUNDS)])  # shorter main runs, the design otherwise
    spec = dataclasses.replace(declared, runs=tmp_path / "drift", page=where, shared=shared)
    for cell in tuning_cells(spec):
        score = dict(zip(spec.tune.values, (0.6, 0.7, 0.8, 0.15)))[cell.value]
        write_run(cell.folder, config_of(spec, cell, configure).to_dict(), [{"val_accuracy": score}] * 30)
    for cell in main_cells(spec, choices(spec)):
        write_run(cell.folder, config_of(spec, cell, configure).to_dict(), main_rows(cell.arm, cell.seed))
    return spec


@pytest.mark.slow  # about 15 to 30 s idle: the page of a whole synthetic study, from its runs and stored
def test_the_page_answers_the_preregistered_questions_from_the_runs(spec: Spec, tmp_path: Path) -> None:
    assert choices(spec) == {key: "0.05" for key in choices(spec)}  # the best score; 0.1 collapsed
    page.write(spec, configure)
    text = (tmp_path / "results.md").read_text()
    assert text.startswith(PREREG + "## Results\n")
    answers = text.split("### Answers")[1].split("###")[0]
    # 5 of 5 seeds higher: the pre-registered t test decides; 5 seeds' exact tests cannot go below 2/32, said beside
    assert ("α=0.1: FedPFN − FedAvg +3.000 points (t test p 0.0002 (exact 0.0625, the smallest 5 seeds can give), "
            "Holm 0.0006; exact sign test, 5 of 5 seeds higher: p 0.0625): higher, on the t test alone: the exact sign "
            "test cannot go below 0.0625 with 5 seeds; final round: +3.00 points, p ") in answers  # fmt: skip
    assert "α=0.5: FedPFN − FedAvg +3.000 points" in answers
    control = (r"α=0\.1: FedPFN − control [+-]\d\.\d{3} points \(t test p [\d.]+ \(exact [\d.]+\), Holm [\d.]+; "
               r"exact sign test, \d of 5 ")  # fmt: skip
    assert re.search(control + r"seeds higher: p [\d.]+\): not resolved; the 95 % CI excludes gains above \+", answers)
    assert "At α=0.1 the control gains as much over FedAvg (+3.00 points" in answers  # FedPFN above FedAvg, not the control
    assert "α=0.1 loss_barrier: FedPFN − FedAvg -0.050 nats: lower;" in answers
    assert "α=0.1 fusion_gap: FedPFN − FedAvg +0.000 points: not resolved; the 95 % CI excludes" in answers
    final = text.split("### The final round")[1].split("###")[0]
    assert ("- α=0.1: every arm that uploads as much as FedAvg (FedPFN, FedPFN fixed, control (client masks)) is "
            "higher (+1.00 to +3.00 points; 5 of 5 seeds higher in each). Each arm − FedAvg: FedPFN +3.00") in final  # fmt: skip
    assert "FedPNU weight -2.00 (0 of 5 higher, lower);" in final
    assert "### Primary family: accuracy over the last 10 rounds (Holm across the 4)" in text
    assert "### Alignment: mean over the run's measurements (Holm across the 8)" in text
    assert "| α=0.1 | FedPFN | 60.00 | 70.00 | 80.00 | collapsed | 0.05 |" in text
    assert f"made by `fedpfn study run {spec.path}` and written by `fedpfn study page {spec.path} --trust-code`" in text
    for alpha in spec.axes["alpha"]:
        for name, family in spec.families.items():
            assert (tmp_path / "figures" / f"drift-mlp-a{alpha}-{name}" / "report.json").is_file()
            assert f"### α = {alpha}: {family.heading}" in text
    (tmp_path / "results.md").unlink()  # where the runs are not: from the stored files alone, the same page
    shutil.rmtree(spec.runs)
    figures = {p: p.read_bytes() for p in (tmp_path / "figures").rglob("*.png")}
    page.write(spec, configure, from_stored=True)
    assert (tmp_path / "results.md").read_text() == text
    assert {p: p.read_bytes() for p in (tmp_path / "figures").rglob("*.png")} == figures


def test_no_page_while_a_run_is_unfinished(spec: Spec, tmp_path: Path) -> None:
    (spec.runs / "main" / "a0.5" / "fedpnu-neuron" / "s4" / "summary.json").unlink()
    with pytest.raises(StudyError, match=r"1 cells are not finished \(first: .*fedpnu-neuron/s4, stopped\)"):
        page.write(spec, configure)
    with pytest.raises(StudyError, match="drift-mlp-page.json is missing"):  # and nothing stored to write it from
        page.write(spec, configure, from_stored=True)
    assert not (tmp_path / "results.md").exists() and not (tmp_path / "figures").exists()


def rewrite_rows(spec: Spec, change: Any) -> None:
    for cell in main_cells(spec):
        metrics = cell.folder / "metrics.jsonl"
        rows = [change(json.loads(line)) for line in metrics.read_text().splitlines()]
        metrics.write_text("".join(json.dumps(row) + "\n" for row in rows))


def zero_barrier(row: dict[str, Any]) -> dict[str, Any]:
    return row | {"align_loss_barrier": 0.0, "align_acc_barrier": 0.01} if "align_loss_barrier" in row else row


def test_observations_name_a_figure_that_never_moved_and_arms_that_never_differed(spec: Spec) -> None:
    d = drift.design(spec)
    assert drift_text.observations(d, drift.collect(spec, d)) == ["- None."]  # every arm its own curve and barrier
    rewrite_rows(spec, zero_barrier)
    for cell in main_cells(spec):
        if cell.arm == "fedpnu-weight":
            twin = Path(str(cell.folder).replace("fedpnu-weight", "fedpfn"))
            (cell.folder / "metrics.jsonl").write_text((twin / "metrics.jsonl").read_text())
    data = drift.collect(spec, d)
    said = drift_text.observations(d, data)
    measured = 2 * len(spec.arms) * len(spec.seeds) * (ROUNDS // 10)
    assert said[0].startswith(f"- The loss barrier was 0 in all {measured} measurements, in every arm at both skews. "
                              "A figure that is 0 in every measurement is a question about the instrument")  # fmt: skip
    assert "clamped at 0 by construction" in said[0] and said[0].endswith("its comparisons below have no test.")
    assert said[1].startswith(f"- The accuracy barrier (measured, not pre-registered, clamped at 0 the same way) "
                              f"averaged 1.00 points over its {measured}")  # fmt: skip
    assert said[2].startswith("- FedPFN and FedPNU weight gave the same test accuracy in every round of every seed.")
    assert said[2].endswith("So FedPNU weight's accuracy is FedPFN's again, not a second finding.")
    assert len(said) == 3
    rows = {row.name: row for row in drift_text.alignment_rows(data)}
    assert rows["α=0.1 loss_barrier: FedPFN − FedAvg"].verdict == "no test: 0 in every measurement, clamped by construction"
    assert drift_text.holm_span(list(rows.values())) == "across the 4 of these 8 that have a test"
    # a signed instrument says where it measured: then a 0 everywhere is a question, not a known clamp
    rewrite_rows(spec, lambda row: row | {"align_measured_on": "test"} if "align_loss_barrier" in row else row)
    said = drift_text.observations(d, drift.collect(spec, d))
    assert said[0].endswith("is a question about the instrument before it is one about the models: can it read anything else?")
    assert said[1].startswith("- The accuracy barrier (measured, not pre-registered) averaged")


def test_the_committed_page_is_what_the_declared_study_writes_from_its_stored_results(tmp_path: Path, monkeypatch, capsys) -> None:
    """docs/results.md is `fedpfn study page --stored studies/drift/drift.toml --trust-code`'s output on docs/study/drift-mlp-*,
    byte for byte (never edited by hand), run where the study's files are and its runs are not."""
    for path in ["studies/drift/drift.toml", "studies/drift/drift.md", "docs/study/drift-mlp-page.json",
                 *(str(p.relative_to(ROOT)) for p in (ROOT / "docs" / "study").glob("drift-mlp-*/*"))]:  # fmt: skip
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_bytes((ROOT / path).read_bytes())
    monkeypatch.chdir(tmp_path)
    assert fedpfn(["study", "page", "--stored", "studies/drift/drift.toml", "--trust-code"]) == 0
    assert capsys.readouterr().out == "wrote docs/results.md\n"
    assert (tmp_path / "docs" / "results.md").read_bytes() == (ROOT / "docs" / "results.md").read_bytes()


def test_the_figure_draws_what_is_stored_and_no_seed_that_is_not(tmp_path: Path, monkeypatch) -> None:
    """The figure's accuracy dots are the reports' stored per-seed differences (the primary family);
    the fusion gap, adopted without them, draws its stored mean and interval alone and says so;
    kept differences are drawn as dots. Written beside the stored file and linked from the page."""
    for path in ["studies/drift/drift.toml", "docs/study/drift-mlp-page.json",
                 *(str(p.relative_to(ROOT)) for p in (ROOT / "docs" / "study").glob("drift-mlp-*/report.*"))]:  # fmt: skip
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_bytes((ROOT / path).read_bytes())
    monkeypatch.chdir(tmp_path)
    spec = load("studies/drift/drift.toml")
    d, data = drift.design(spec), spec.stored_results()
    reports = {a: {name: drift.stored_report(spec, drift.report_folder(spec, a, name)) for name in d.reports} for a in d.alphas}
    primary = drift_text.primary_family(d, reports)
    (acc_title, acc), (gap_title, gap) = drift.figure_panels(primary, drift_text.alignment_rows(data), 10).items()
    stored = [next(p["diffs"] for p in reports[a][f]["paired"] if p["metric"] == "lastk" and p["label"] == reports[a][f]["arms"][1]["arm"])
              for a in ("0.1", "0.5") for f in ("all", "control")]  # fmt: skip
    assert [s.label for s in acc] == ["α=0.1: FedPFN − FedAvg", "α=0.1: FedPFN − control", "α=0.5: FedPFN − FedAvg",
                                      "α=0.5: FedPFN − control"] == [s.label for s in gap]  # fmt: skip
    assert [list(s.points) for s in acc] == [[100 * x for x in diffs] for diffs in stored]
    kept = [c for c in data["alignment"] if "fusion_gap" in c["label"]]
    assert [(list(s.points), s.mean, s.low, s.high) for s in gap] == [([], 100 * c["mean"], 100 * c["low"], 100 * c["high"])
                                                                      for c in kept]  # fmt: skip
    assert acc_title == "primary: accuracy, last 10 rounds" and "seeds not kept" in gap_title
    for c in kept:
        c["diffs"] = [0.01, 0.02, 0.0, -0.01, 0.03]  # had they been kept: drawn, seed by seed
    title, drawn = list(drift.figure_panels(primary, drift_text.alignment_rows(data), 10).items())[1]
    assert title == "fusion gap" and [list(s.points) for s in drawn] == [[1.0, 2.0, 0.0, -1.0, 3.0]] * 4
    lines = drift.section(spec)
    link = next(i for i, line in enumerate(lines) if line.startswith("!["))
    assert lines[link].endswith("(study/drift-mlp-page-accuracy-gap.png)") and lines[link - 4].startswith("| α=0.5 fusion_gap")
    assert lines[link - 2] == VERDICT_KEY  # the table's verdict words, once under it
    assert (tmp_path / "docs/study/drift-mlp-page-accuracy-gap.png").read_bytes().startswith(b"\x89PNG")


def test_the_pages_summary_says_what_its_primary_table_says() -> None:
    """The lines atop docs/results.md (the page in short) agree with the primary family's table below:
    each comparison's label and verdict, and its difference and 95 % interval (the summary's two
    decimals within rounding of the table's three)."""
    text = (ROOT / "docs" / "results.md").read_text()
    short = text.split("**In short.**")[1].split("\n\n", 2)[1].splitlines()
    table = text.split("### Primary family")[1].split("\n\n")[1].splitlines()[2:]
    assert len(short) == len(table) == 4
    for line, row in zip(short, table):
        label, mean, ci, *_, verdict = (cell.strip() for cell in row.strip("|").split("|"))
        said = re.fullmatch(r"- (.+): ([+-][\d.]+) points \[([+-][\d.]+), ([+-][\d.]+)\]: (.+)", line)
        assert said is not None and said[1] == label and said[5] == verdict.split(";")[0], line
        shown = [float(mean), *(float(x) for x in ci.strip("[]").split(", "))]
        assert all(abs(float(said[i]) - value) <= 0.0051 for i, value in zip((2, 3, 4), shown)), (line, row)
