"""scripts/drift_page.py on synthetic drift-study runs with planted effects: the answers it writes
under docs/results.md's pre-registration say what the numbers support, the page comes out the
same from what it stored in docs/study/ as from the runs, nothing is written while a run is
unfinished, and a bad argument is one line.

The folders are written as a run writes them (config.json, metrics.jsonl, summary.json last),
so the page is tested without training anything.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "scripts"))
import drift_page  # noqa: E402
import drift_reading  # noqa: E402
from drift_study import ALPHAS, ARMS, LR_GRID, SEEDS, Study  # noqa: E402

ROUNDS = 20
NOISE = (0.004, -0.003, 0.001, -0.002, 0.0)  # small next to the planted effects, summing to 0
ARM_SETTINGS: dict[str, dict[str, Any]] = {
    "fedavg": {"algorithm": "fedavg"},
    "fedpfn": {"algorithm": "fedpfn", "anchor_schedule": "round", "anchor_masks": "shared"},
    "fedpfn-fixed": {"algorithm": "fedpfn", "anchor_schedule": "fixed", "anchor_masks": "shared"},
    "fedpfn-client": {"algorithm": "fedpfn", "anchor_schedule": "round", "anchor_masks": "client"},
    "fedpnu-weight": {"algorithm": "fedpnu", "anchor_granularity": "weight"},
    "fedpnu-neuron": {"algorithm": "fedpnu", "anchor_granularity": "neuron"},
}
# Planted, per arm: accuracy over FedAvg's, loss barrier, fusion gap. FedPFN is 3 points above
# FedAvg with a barrier 0.05 lower; the control differs from FedPFN only by the noise. FedPNU
# uploads less (UPLOAD), so the arms that upload as much as FedAvg are FedPFN's three.
PLANTED = {
    "fedavg": (0.0, 0.10, 0.05), "fedpfn": (0.03, 0.05, 0.05), "fedpfn-fixed": (0.01, 0.05, 0.05),
    "fedpfn-client": (0.03, 0.05, 0.05), "fedpnu-weight": (-0.02, 0.1, 0.05), "fedpnu-neuron": (-0.04, 0.1, 0.05),
}  # fmt: skip
UPLOAD = {"fedpnu-weight": 600, "fedpnu-neuron": 600}  # bytes a round; every other arm 1000


def write_run(folder: Path, config: dict[str, Any], rows: list[dict[str, Any]]) -> None:
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps({**config, "rounds": len(rows), "out": str(folder)}))
    (folder / "metrics.jsonl").write_text("".join(json.dumps({"round": r, **row}) + "\n" for r, row in enumerate(rows, 1)))
    (folder / "summary.json").write_text("{}")


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
def study(tmp_path: Path) -> Study:
    """Every grid run (lr 0.05 scores best, 0.1 collapses) and every main run of the design."""
    study = Study("mlp")
    study.runs = tmp_path / "drift"
    base = {"dataset": "fmnist", "model": "mlp", "num_clients": 100, "clients_per_round": 10, "alpha": 0.1}
    for alpha in ALPHAS:
        for arm, settings in ARM_SETTINGS.items():
            for lr, score in zip(LR_GRID, (0.6, 0.7, 0.8, 0.15)):
                write_run(study.grid_run(alpha, arm, lr), {**base, **settings, "lr": float(lr), "seed": 0},
                          [{"val_accuracy": score, "test_accuracy": score}] * 30)  # fmt: skip
            for seed in SEEDS:
                config = {**base, **settings, "alpha": float(alpha), "lr": 0.05, "seed": seed}
                write_run(study.main_run(alpha, arm, seed), config, main_rows(arm, seed))
    return study


@pytest.mark.slow  # about 15 to 28 s idle: the page script on a whole synthetic study
def test_the_page_answers_the_preregistered_questions_from_the_runs(study: Study, tmp_path: Path) -> None:
    assert set(ARM_SETTINGS) == set(ARMS)
    page = tmp_path / "results.md"
    prereg = "# Results\n\n## Pre-registration\n\nThe design, as written before the runs.\n\n"
    page.write_text(prereg + "## Results\n\nNot yet run.\n")
    drift_page.write_page(study, page, tmp_path / "figures")
    text = page.read_text()
    assert text.startswith(prereg + "## Results\n") and "Not yet run" not in text
    answers = text.split("### Answers")[1].split("###")[0]
    # 5 of 5 seeds higher: the t test resolves it, the exact sign test cannot go below 2/32
    assert "α=0.1: FedPFN − FedAvg +3.000 points (t test p " in answers
    assert ("; exact sign test, 5 of 5 seeds higher: p 0.0625): higher, on the t test alone: the exact sign test "
            "cannot go below 0.0625 with 5 seeds; final round: +3.00 points, p ") in answers  # fmt: skip
    assert "α=0.5: FedPFN − FedAvg +3.000 points" in answers
    control = r"α=0\.1: FedPFN − control [+-]\d\.\d{3} points \(t test p [\d.]+, Holm [\d.]+; exact sign test, \d of 5 "
    assert re.search(control + r"seeds higher: p [\d.]+\): not resolved; the 95 % CI excludes gains above \+", answers)
    assert "At α=0.1 the control gains as much over FedAvg (+3.00 points, 5 of 5 seeds higher) as FedPFN" in answers
    assert "α=0.1 loss_barrier: FedPFN − FedAvg -0.050 nats: lower" in answers
    assert "α=0.1 fusion_gap: FedPFN − FedAvg +0.000 points: not resolved; the 95 % CI excludes" in answers
    final = text.split("### The final round")[1].split("###")[0]
    assert ("- α=0.1: every arm that uploads as much as FedAvg (FedPFN, FedPFN fixed, control (client masks)) is "
            "higher (+1.00 to +3.00 points; 5 of 5 seeds higher in each). Each arm − FedAvg: FedPFN +3.00") in final  # fmt: skip
    assert "FedPNU weight -2.00 (0 of 5 higher, lower)" in final  # uploads less: not in the lead
    assert "### Primary family: accuracy over the last 10 rounds (Holm across the 4)" in text
    assert "### Alignment: mean over the run's measurements (Holm across the 8)" in text
    assert "| α=0.1 | FedPFN | 60.00 | 70.00 | 80.00 | collapsed | 0.05 |" in text
    for alpha in ALPHAS:
        for name in drift_page.REPORTS:
            assert (tmp_path / "figures" / f"drift-mlp-a{alpha}-{name}" / "report.json").is_file()
            assert f"### α = {alpha}: {drift_page.REPORTS[name][1]}" in text
    again = tmp_path / "again.md"  # where the runs are not: from docs/study alone, the same page
    again.write_text(prereg + "## Results\n\nNot yet run.\n")
    figures = {p: p.read_bytes() for p in (tmp_path / "figures").rglob("*.png")}
    drift_page.write_stored("mlp", again, tmp_path / "figures")
    assert again.read_text() == text
    assert {p: p.read_bytes() for p in (tmp_path / "figures").rglob("*.png")} == figures


def test_no_page_while_a_run_is_unfinished(study: Study, tmp_path: Path) -> None:
    page = tmp_path / "results.md"
    page.write_text("## Results\n\nNot yet run.\n")
    (study.main_run("0.5", "fedpnu-neuron", 4) / "summary.json").unlink()
    with pytest.raises(SystemExit, match="1 main runs are not finished"):
        drift_page.write_page(study, page, tmp_path / "figures")
    with pytest.raises(SystemExit, match="drift-mlp-page.json is missing"):  # and nothing stored to write it from
        drift_page.write_stored("mlp", page, tmp_path / "figures")
    assert page.read_text() == "## Results\n\nNot yet run.\n"


def rewrite_rows(study: Study, change: Any) -> None:
    for alpha in ALPHAS:
        for seed in SEEDS:
            for arm in ARMS:
                metrics = study.main_run(alpha, arm, seed) / "metrics.jsonl"
                rows = [change(json.loads(line)) for line in metrics.read_text().splitlines()]
                metrics.write_text("".join(json.dumps(row) + "\n" for row in rows))


def zero_barrier(row: dict[str, Any]) -> dict[str, Any]:
    return row | {"align_loss_barrier": 0.0, "align_acc_barrier": 0.01} if "align_loss_barrier" in row else row


def test_observations_name_a_figure_that_never_moved_and_arms_that_never_differed(study: Study) -> None:
    assert drift_reading.observations(drift_page.collect(study)) == ["- None."]  # every arm its own curve and barrier
    rewrite_rows(study, zero_barrier)
    for alpha in ALPHAS:
        for seed in SEEDS:
            pfn = study.main_run(alpha, "fedpfn", seed) / "metrics.jsonl"
            (study.main_run(alpha, "fedpnu-weight", seed) / "metrics.jsonl").write_text(pfn.read_text())
    data = drift_page.collect(study)
    said = drift_reading.observations(data)
    measured = 2 * len(ARMS) * len(SEEDS) * (ROUNDS // 10)
    assert said[0].startswith(f"- The loss barrier was 0 in all {measured} measurements, in every arm at both skews. "
                              "A figure that is 0 in every measurement is a question about the instrument")  # fmt: skip
    assert "clamped at 0 by construction" in said[0] and said[0].endswith("its comparisons below have no test.")
    assert said[1].startswith(f"- The accuracy barrier (measured, not pre-registered, clamped at 0 the same way) "
                              f"averaged 1.00 points over its {measured}")  # fmt: skip
    assert said[2].startswith("- FedPFN and FedPNU weight gave the same test accuracy in every round of every seed.")
    assert said[2].endswith("So FedPNU weight's accuracy is FedPFN's again, not a second finding.")
    assert len(said) == 3
    rows = {row.name: row for row in drift_reading.alignment_rows(data)}
    assert rows["α=0.1 loss_barrier: FedPFN − FedAvg"].verdict == "no test: 0 in every measurement, clamped by construction"
    assert drift_reading.holm_span(list(rows.values())) == "across the 4 of these 8 that have a test"
    # a signed instrument says where it measured: then a 0 everywhere is a question, not a known clamp
    rewrite_rows(study, lambda row: row | {"align_measured_on": "test"} if "align_loss_barrier" in row else row)
    said = drift_reading.observations(drift_page.collect(study))
    assert said[0].endswith("is a question about the instrument before it is one about the models: can it read anything else?")
    assert said[1].startswith("- The accuracy barrier (measured, not pre-registered) averaged")


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["zzz"], "drift_page.py: unrecognized arguments: zzz"),
        (["--model", "gpt"], "drift_page.py: argument --model: invalid choice: 'gpt' (choose from 'mlp', 'cnn')"),
        (["--stored", "yes"], "drift_page.py: unrecognized arguments: yes"),
    ],
)
def test_a_bad_argument_is_one_line_and_exit_2(args: list[str], says: str, capsys) -> None:
    with pytest.raises(SystemExit) as stop:
        drift_page.cli(args)
    out, err = capsys.readouterr()
    assert stop.value.code == 2 and out == "" and err == f"{says} (--help lists what is accepted)\n"


def test_the_committed_page_is_what_its_stored_data_writes(tmp_path: Path) -> None:
    """docs/results.md's results are drift_page.py's output on docs/study/drift-mlp-*, byte for byte
    (never edited by hand), and that data is what drift_page_adopt.py reads off the page at 4f77cc0."""
    root = Path(__file__).parents[1]
    figures = tmp_path / "study"
    for folder in (root / "docs" / "study").glob("drift-mlp-*"):
        if folder.is_dir():
            (figures / folder.name).mkdir(parents=True)
            for name in ("report.json", "report.md", "report.csv", ".fedpfn-outputs.json"):
                (figures / folder.name / name).write_bytes((folder / name).read_bytes())
        else:
            (figures / folder.name).write_bytes(folder.read_bytes())
    page = tmp_path / "results.md"
    committed = (root / "docs" / "results.md").read_text()
    page.write_text(committed.split("## Results")[0] + "## Results\n\nNot yet written.\n")
    drift_page.write_stored("mlp", page, figures)
    assert page.read_text() == committed
    known = subprocess.run(["git", "cat-file", "-e", "4f77cc0^{commit}"], cwd=root, capture_output=True)
    if known.returncode == 0:  # a checkout with the history the data was read from
        import drift_page_adopt

        stored = json.loads((figures / "drift-mlp-page.json").read_text())
        assert json.loads(json.dumps(drift_page_adopt.adopt("4f77cc0", "mlp"))) == stored
