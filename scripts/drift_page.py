#!/usr/bin/env python
"""docs/results.md's results, from the drift study's finished runs or from what they left in docs/study/.

    python scripts/drift_page.py [--model mlp]             # from the runs under runs/drift/<model>/
    python scripts/drift_page.py [--model mlp] --stored    # from docs/study/drift-<model>-* alone

The page keeps its pre-registration (everything above `## Results`) and replaces what follows
with: the answers to the pre-registered questions (the exact sign test and the final round
beside the pre-registered t test), computed observations, the primary and the alignment family,
each Holm-adjusted across its comparisons that have a test, the learning-rate grid, and per skew
the tables of `python -m fedpfn.analysis.report` (each with its command; figures under
docs/study/drift-*/). From the runs, nothing is written unless every main run is finished, and
what the page reads from them besides the reports is kept in docs/study/drift-<model>-page.json.
`--stored` writes the page again from that file and the reports' JSON (their tables rendered
again, their figures as drawn): for a machine without the runs.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
from drift_reading import ACC_BARRIER, ALIGNMENT, REPORTS, results
from drift_study import ALPHAS, ARMS, ROOT, SEEDS, Study

from fedpfn.analysis.render import rewrite_tables
from fedpfn.analysis.report import main as report_main
from fedpfn.analysis.stats import Paired, adjust, paired
from fedpfn.core.files import METRICS, SUMMARY, read_json, read_jsonl
from fedpfn.core.settings import ConfigError, OneLineParser

PAGE = ROOT / "docs" / "results.md"
FIGURES = ROOT / "docs" / "study"
RESULTS = "## Results"
MODELS = ("mlp", "cnn")  # the study's versions: this machine's and the full design's (scripts/drift_study.py)
SIGNED_MARK = "align_measured_on"  # written with every measurement by the signed barrier, never by the clamped one


def shown(path: Path) -> str:
    """A path as the page's commands give it: relative to the checkout when it lies inside."""
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def report_folder(figures: Path, model: str, alpha: str, name: str) -> Path:
    return figures / f"drift-{model}-a{alpha}-{name}"


def page_data(figures: Path, model: str) -> Path:
    """What the page reads from the runs besides the reports, kept beside them."""
    return figures / f"drift-{model}-page.json"


def report(study: Study, alpha: str, name: str, figures: Path) -> dict[str, Any]:
    """`python -m fedpfn.analysis.report` over one REPORTS entry's main runs at `alpha`, run in this
    process from the checkout (its command, as the page shows it, is the same)."""
    out = report_folder(figures, study.model, alpha, name)
    folders = [shown(study.main_run(alpha, arm, 0).parent) for arm in REPORTS[name][0]]
    with contextlib.chdir(ROOT), contextlib.redirect_stdout(io.StringIO()):
        code = report_main([*folders, "--last-k", "10", "--out", shown(out)])
    if code:
        raise SystemExit(f"drift_page: the report of {shown(out)} failed (exit {code})")
    result = json.loads((out / "report.json").read_text())
    result["markdown"] = (out / "report.md").read_text()  # its second line: the command that made it
    return result


def stored_report(out: Path) -> dict[str, Any]:
    """A report's JSON, its tables rendered again from it (the verdicts as this checkout words them)."""
    try:
        markdown = rewrite_tables(out)
    except (OSError, ConfigError) as err:
        raise SystemExit(f"drift_page: {out}: {err}") from None
    return {**json.loads((out / "report.json").read_text()), "markdown": markdown}


def values(run: Path, key: str) -> list[Any]:
    """`key` in every metrics row of `run` that has it (alignment: every 10th round)."""
    return [r[key] for r in read_jsonl(run / METRICS) if r.get(key) is not None]


def alignment_means(study: Study, alpha: str, arm: str, key: str) -> dict[int, float]:
    """Seed -> the run's mean of `key` over its alignment measurements."""
    out = {}
    for seed in SEEDS:
        run = study.main_run(alpha, arm, seed)
        measured = values(run, key)
        if not measured:
            raise SystemExit(f"drift_page: {run} has no {key} measurement; was it run with --alignment-every?")
        out[seed] = float(np.mean(measured))
    return out


def alignment_family(study: Study) -> list[Paired]:
    """FedPFN − FedAvg and FedPFN − control of each alignment figure at each skew, Holm-adjusted together."""
    family = []
    for alpha in ALPHAS:
        for key in ALIGNMENT:
            ours = alignment_means(study, alpha, "fedpfn", key)
            for base, name in (("fedavg", "FedAvg"), ("fedpfn-client", "control (client masks)")):
                label = f"α={alpha} {key.removeprefix('align_')}: FedPFN − {name}"
                family.append(paired(label, "alignment", ours, alignment_means(study, alpha, base, key)))
    adjust(family)
    return family


def main_runs(study: Study) -> list[Path]:
    return [study.main_run(alpha, arm, seed) for alpha in ALPHAS for arm in ARMS for seed in SEEDS]


def same_curves(study: Study) -> list[tuple[str, str]]:
    """Arm pairs whose test accuracy is equal in every round of every seed at every skew."""
    curves = {arm: [values(study.main_run(alpha, arm, s), "test_accuracy") for alpha in ALPHAS for s in SEEDS]
              for arm in ARMS}  # fmt: skip
    return [(a, b) for i, a in enumerate(ARMS) for b in list(ARMS)[i + 1 :] if curves[a] == curves[b]]


def clamped(study: Study) -> bool:
    """Whether the runs' barriers came from the clamped instrument: no measurement says where it was taken."""
    rows = [row for run in main_runs(study) for row in read_jsonl(run / METRICS) if ALIGNMENT[0] in row]
    return bool(rows) and not any(SIGNED_MARK in row for row in rows)


def collect(study: Study) -> dict[str, Any]:
    """What the page reads from the runs besides the reports, as plain data (accuracy as a fraction)."""
    measured = {key: [v for run in main_runs(study) for v in values(run, key)] for key in (*ALIGNMENT, ACC_BARRIER)}
    acc = measured[ACC_BARRIER]
    return {
        "source": f"the main and grid runs under {shown(study.runs)}, read by scripts/drift_page.py",
        "alignment": [dataclasses.asdict(p) for p in alignment_family(study)],
        "always_zero": {key: len(v) for key, v in measured.items() if v and all(x == 0 for x in v)},
        "clamped": clamped(study),
        "acc_barrier": {"count": len(acc), "mean": float(np.mean(acc)), "max": float(max(acc))} if acc else None,
        "same_curves": same_curves(study),
        "grid": study.grid_table(),
        "chosen": {alpha: {arm: study.chosen_lr(alpha, arm) for arm in ARMS} for alpha in ALPHAS},
    }


def unfinished(study: Study) -> list[Path]:
    return [run for run in main_runs(study) if not (run / SUMMARY).exists()]


def head_of(page: Path) -> str:
    """`page` above its results: the pre-registration, kept as written."""
    text = page.read_text()
    if RESULTS not in text:
        raise SystemExit(f"drift_page: {page} has no '{RESULTS}' heading below its pre-registration; nothing written")
    return text.split(RESULTS)[0]


def write_results(page: Path, head: str, body: list[str]) -> None:
    page.write_text(head + "\n".join(body))
    print(f"wrote {page}")


def write_page(study: Study, page: Path = PAGE, figures: Path = FIGURES) -> None:
    """The page's results from the finished runs; what it read from them stored beside the reports."""
    missing = unfinished(study)
    if missing:
        raise SystemExit(f"drift_page: {len(missing)} main runs are not finished (first: {missing[0]}); {page} "
                         f"is left as it is (without the runs: --stored)")  # fmt: skip
    head, data = head_of(page), collect(study)
    reports = {alpha: {name: report(study, alpha, name, figures) for name in REPORTS} for alpha in ALPHAS}
    page_data(figures, study.model).write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n")
    write_results(page, head, results(data, reports, study.model))


def write_stored(model: str, page: Path = PAGE, figures: Path = FIGURES) -> None:
    """The page's results again from docs/study/ alone: the reports' JSON and the page's data."""
    stored = page_data(figures, model)
    if not stored.is_file():
        raise SystemExit(f"drift_page: {shown(stored)} is missing: the {model} study's page was never written "
                         f"from its runs; {page} is left as it is")  # fmt: skip
    head, data = head_of(page), read_json(stored)
    reports = {alpha: {name: stored_report(report_folder(figures, model, alpha, name)) for name in REPORTS}
               for alpha in ALPHAS}  # fmt: skip
    write_results(page, head, results(data, reports, model))


def cli(argv: list[str] | None = None) -> int:
    parser = OneLineParser(prog="drift_page.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="mlp", choices=MODELS, help="the study's model: mlp (this machine's "
                        "version) or cnn (the full design)")  # fmt: skip
    parser.add_argument("--stored", action="store_true", help="from docs/study/drift-<model>-* alone, not the runs")
    args = parser.parse_args(argv)
    if args.stored:
        write_stored(args.model)
    else:
        write_page(Study(args.model))
    return 0


if __name__ == "__main__":
    sys.exit(cli())
