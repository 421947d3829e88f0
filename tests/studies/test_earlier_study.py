"""The earlier study as a declared study (studies/earlier/earlier.toml, its page's reading
studies.earlier.readings) on synthetic runs: from the learning-rate grid, the server grid and the
main comparison and one follow-up, the page reports the grid's choices and those comparisons,
lists the other follow-ups as not yet run, and comes out the same from what it stored as from
the runs; the follow-up studies declare exactly the folders the page compares. (The committed
docs/results_earlier.md from its stored results: tests/studies/test_study_pages.py.)
"""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
from pathlib import Path
from typing import Any

from fedpfn.cli.study import configure, trust_code
from fedpfn.study import page
from fedpfn.study.cells import choices, config_of, main_cells, merged, tuning_cells
from fedpfn.study.spec import load
from studies.earlier import readings as earlier
from studies.earlier.text import RATIOS, SERVER_GRID, comparisons

ROOT = Path(__file__).parents[2]
ROUNDS = 6
GAIN = {"fedavg": 0.0, "fedpfn": 0.03, "fedpnu": -0.02}  # planted on test accuracy
NOISE = (0.004, -0.003, 0.001, -0.002, 0.0)


def write_run(folder: Path, config: dict[str, Any], rows: list[dict[str, Any]]) -> None:
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps(config))
    (folder / "metrics.jsonl").write_text("".join(json.dumps({"round": r, **row}) + "\n" for r, row in enumerate(rows, 1)))
    (folder / "summary.json").write_text(json.dumps({"wall_seconds": 360.0, "rounds": len(rows)}))


def main_rows(arm: str, seed: int) -> list[dict[str, Any]]:
    noise = NOISE[(seed + list(GAIN).index(arm)) % len(NOISE)]
    return [{"test_accuracy": 0.5 + 0.01 * r + 0.01 * seed + GAIN[arm] + noise, "test_loss": 0.5, "train_loss": 1 / r,
             "bytes_up": 1000, "bytes_down": 1000, "num_clients": 10, "num_failures": 0} for r in range(1, ROUNDS + 1)]  # fmt: skip


def test_the_page_from_runs_is_the_page_from_its_stored_file(tmp_path: Path) -> None:
    declared = load(ROOT / "studies" / "earlier" / "earlier.toml")
    trust_code(declared, "page", True, stored=True)  # its readings are the study's own code: --trust-code
    (tmp_path / "template.md").write_text("# Earlier\n\n<!-- study: earlier-summary -->\n\n<!-- study: earlier -->\n## After\n")
    where = dataclasses.replace(declared.page, out=tmp_path / "page.md", template=tmp_path / "template.md",
                                stored=tmp_path / "kept" / "earlier-page.json", changed_verdicts=False)  # a new page  # fmt: skip
    spec = dataclasses.replace(declared, runs=tmp_path / "runs", page=where,
                               shared=merged(declared.shared, ["--rounds", str(ROUNDS)]))  # fmt: skip
    for cell in tuning_cells(spec):  # lr 0.03 best, 0.1 diverged
        score = dict(zip(spec.tune.values, (0.6, 0.7, 0.15)))[cell.value]
        write_run(cell.folder, config_of(spec, cell, configure).to_dict(), [{"val_accuracy": score}] * 5)
    for server, rates in SERVER_GRID.items():
        for k, rate in enumerate(rates):
            write_run(spec.runs / "grid" / "a0.1" / f"{server}-slr{rate}" / "fedavg-s0", {}, [{"val_accuracy": 0.5 + 0.1 * k}] * 5)
    for cell in main_cells(spec, choices(spec)):
        write_run(cell.folder, config_of(spec, cell, configure).to_dict(), main_rows(cell.arm, cell.seed))
    follow_ups = load(ROOT / "studies" / "earlier" / "earlier-follow-ups.toml")
    follow_ups = dataclasses.replace(follow_ups, shared=merged(follow_ups.shared, ["--rounds", str(ROUNDS)]))
    for cell in main_cells(follow_ups):  # of the follow-ups, only the anchor schedule has finished
        if "fedpfn-fixed" in str(cell.folder):
            write_run(spec.runs / cell.folder.relative_to(follow_ups.runs), config_of(follow_ups, cell, configure).to_dict(),
                      main_rows("fedavg", cell.seed))  # 3 points below FedPFN's  # fmt: skip

    page.write(spec, configure)
    text = (tmp_path / "page.md").read_text()
    assert text.startswith("# Earlier\n\n**In short.** Does training-time alignment help") and "\n\nMade on " in text
    assert text.endswith("\n## After\n")  # a new page: no list of changes
    assert "| 0.1 | fedpfn | 60.00 | 70.00 | diverged | 0.03 |" in text and "6 of 18 grid runs diverged." in text
    assert "| fedadam | 0.03 | 70.00 |" in text and "Chosen: fedavgm 1.0 (an end of its grid), fedadam 0.03" in text
    # +3 points on each of 5 seeds: the t test whose interval is printed resolves it; the exact test's floor,
    # 0.0625, stands beside
    said = re.search(r"\n- higher than the baseline: fedpfn in \*FedAvg, FedPFN, FedPNU at Dirichlet 0\.1\* "
                     r"\(\+3\.00 \[(\+[\d.]+), (\+[\d.]+)\], p Holm ", text.split("## Answers")[0])  # atop, with its interval
    assert said and 0 < float(said[1]) <= 3.0 <= float(said[2])
    assert "- not resolved from the baseline: none.\n" in text
    assert ("- **Anchor schedule (FedPFN, Dirichlet 0.1)**\n  - fedpfn anchor_schedule=fixed: accuracy over the last 5 of "
            "6 rounds against fedpfn anchor_schedule=round: -3.00 points") in text  # fmt: skip
    assert "(exact 0.0625, the smallest 5 seeds can give)" in text
    assert "- **FedPFN under fedadam (Dirichlet 0.1)**: not yet run." in text
    assert "## Not yet run" in text and "- FedPFN under fedavgm (Dirichlet 0.1): `servers-a0.1/fedavg-fedavgm, " in text
    assert (tmp_path / "kept" / "main-a0.5" / "report.json").is_file()

    (tmp_path / "page.md").unlink()
    shutil.rmtree(tmp_path / "runs")  # where the runs are not: the same page from the stored files
    page.write(spec, configure, from_stored=True)
    assert (tmp_path / "page.md").read_text() == text


def test_the_follow_up_studies_declare_every_folder_the_page_compares() -> None:
    """Each comparison's folders are the main study's arms or the follow-up studies' cell folders, and
    the server grid's are the ones the page scores: no follow-up is run where the page does not read it."""
    spec = load(ROOT / "studies" / "earlier" / "earlier.toml")
    declared = {f"main-a{alpha}/{arm}" for alpha in spec.axes["alpha"] for arm in spec.arms}
    runs = earlier.follow_up_runs(spec)
    ratios = [f"main-a0.1/fedpnu-r{ratio}" for ratio in RATIOS]
    compared = {f for c in comparisons(spec, ratios) for f in c.folders}
    grid = {f"grid/a0.1/{server}-slr{rate}" for server, rates in SERVER_GRID.items() for rate in rates}
    assert set(runs) == (compared - declared) | grid
    assert all(names == [f"{names[0].split('-s')[0]}-s{seed}" for seed in range(len(names))] for names in runs.values())
