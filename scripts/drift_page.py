#!/usr/bin/env python
"""docs/results.md's results, from the drift study's finished runs.

    python scripts/drift_page.py [--model mlp]      # or: python scripts/drift_study.py page

The page keeps its pre-registration (everything above `## Results`) and replaces what follows
with: the answers to the pre-registered questions, the primary family Holm-adjusted across
its four comparisons, the alignment family across its eight, the learning-rate grid, and per
skew the tables of `python -m fedpfn.analysis.report` (each with its command; figures under
docs/study/drift-*/). Nothing is written unless every main run is finished: a page reports
finished runs only.
"""

from __future__ import annotations

import argparse
import itertools
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
from drift_study import ALPHAS, ARMS, LR_GRID, ROOT, SEEDS, Study

from fedpfn.analysis.render import verdict
from fedpfn.analysis.stats import Paired, adjust, paired
from fedpfn.core.files import CONFIG, METRICS, SUMMARY, read_jsonl

PAGE = ROOT / "docs" / "results.md"
FIGURES = ROOT / "docs" / "study"
RESULTS = "## Results"
NAMES = {
    "fedavg": "FedAvg", "fedpfn": "FedPFN", "fedpfn-fixed": "FedPFN fixed", "fedpfn-client": "control (client masks)",
    "fedpnu-weight": "FedPNU weight", "fedpnu-neuron": "FedPNU neuron",
}  # fmt: skip
ALIGNMENT = ("align_loss_barrier", "align_fusion_gap")
REPORTS = {  # name -> (its arms, the first the baseline; its heading)
    "all": (list(ARMS), "every arm against FedAvg"),
    "control": (["fedpfn-client", "fedpfn"], "FedPFN against the control"),
    "schedule": (["fedpfn", "fedpfn-fixed"], "`fixed` against `round`"),
}
Row = tuple[str, dict[str, Any]]  # a comparison's name and its numbers with its verdict


def shown(path: Path) -> str:
    """A path as the page's commands give it: relative to the checkout when it lies inside."""
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def report(study: Study, alpha: str, name: str, figures: Path) -> dict[str, Any]:
    """fedpfn.analysis.report over one REPORTS entry's main runs at `alpha`."""
    out = figures / f"drift-{study.model}-a{alpha}-{name}"
    folders = [shown(study.main_run(alpha, arm, 0).parent) for arm in REPORTS[name][0]]
    cmd = [sys.executable, "-m", "fedpfn.analysis.report", *folders, "--last-k", "10", "--out", shown(out)]
    subprocess.run(cmd, cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
    result = json.loads((out / "report.json").read_text())
    result["markdown"] = (out / "report.md").read_text()  # its second line: the command that made it
    return result


def lastk_comparison(result: dict[str, Any], arm: str, name: str) -> Paired:
    """The report's last-10-rounds comparison of `arm` (a REPORTS entry's arm) against its baseline."""
    label = result["arms"][REPORTS[name][0].index(arm)]["arm"]
    found = next(p for p in result["paired"] if p["label"] == label and p["metric"] == "lastk")
    return Paired(**{k: v for k, v in found.items() if k in Paired.__dataclass_fields__})


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


def with_verdict(name: str, comparison: Paired) -> Row:
    scale, unit = scale_of(name)
    return name, {**comparison.__dict__, "verdict": verdict(comparison, scale, unit)}


def alignment_family(study: Study) -> list[Row]:
    """FedPFN − FedAvg and FedPFN − control of each alignment figure at each skew, Holm-adjusted together."""
    family = []
    for alpha in ALPHAS:
        for key in ALIGNMENT:
            ours = alignment_means(study, alpha, "fedpfn", key)
            for base in ("fedavg", "fedpfn-client"):
                label = f"α={alpha} {key.removeprefix('align_')}: FedPFN − {NAMES[base]}"
                family.append(paired(label, "alignment", ours, alignment_means(study, alpha, base, key)))
    adjust(family)
    return [with_verdict(p.label, p) for p in family]


def primary_family(reports: dict[str, dict[str, dict]]) -> list[Row]:
    """FedPFN − FedAvg and FedPFN − control at both skews, their p Holm-adjusted across the four."""
    family = {}
    for alpha in ALPHAS:
        family[f"α={alpha}: FedPFN − FedAvg"] = lastk_comparison(reports[alpha]["all"], "fedpfn", "all")
        family[f"α={alpha}: FedPFN − control"] = lastk_comparison(reports[alpha]["control"], "fedpfn", "control")
    adjust(family.values())
    return [with_verdict(name, comparison) for name, comparison in family.items()]


def scale_of(name: str) -> tuple[float, str]:
    """Accuracy figures in points (100 × a fraction); a loss barrier as it is, in nats."""
    return (1.0, "nats") if "loss_barrier" in name else (100.0, "points")


def answers(primary: list[Row], alignment: list[Row]) -> list[str]:
    """The pre-registered questions, each answered by its comparisons' verdicts (nothing else)."""

    def said(rows: list[Row], needle: str) -> str:
        return "; ".join(f"{name}: {c['verdict']} ({scale_of(name)[0] * c['mean']:+.3f})" for name, c in rows if needle in name)

    return [
        f"1. FedPFN against FedAvg — {said(primary, 'FedAvg')}.",
        f"2. FedPFN against the control (as much freezing, nothing shared) — {said(primary, 'control')}.",
        f"3. Misalignment, FedPFN against FedAvg — {said(alignment, 'FedAvg')}.",
        f"   FedPFN against the control — {said(alignment, 'control')}.",
    ]


def measurements(study: Study, key: str) -> list[float]:
    """Every value of `key` in every main run (all arms, skews and seeds)."""
    runs = [study.main_run(alpha, arm, seed) for alpha in ALPHAS for arm in ARMS for seed in SEEDS]
    return [value for run in runs for value in values(run, key)]


def same_curves(study: Study) -> list[tuple[str, str]]:
    """Arm pairs whose test accuracy is equal in every round of every seed at every skew."""
    curves = {arm: [values(study.main_run(alpha, arm, s), "test_accuracy") for alpha in ALPHAS for s in SEEDS]
              for arm in ARMS}  # fmt: skip
    return [(a, b) for a, b in itertools.combinations(ARMS, 2) if curves[a] == curves[b]]


def observations(study: Study) -> list[str]:
    """What the runs show that the pre-registration did not foresee, computed, never typed in."""
    lines = []
    for key in ALIGNMENT:
        values = measurements(study, key)
        if values and all(v == 0 for v in values):
            lines.append(f"- The {key.removeprefix('align_').replace('_', ' ')} was 0 in all {len(values)} measurements, "
                         "in every arm at both skews: no point on the line between two client models lay above the "
                         "straight line between their end points, so this figure cannot tell arms apart here.")  # fmt: skip
    acc = measurements(study, "align_acc_barrier")
    if acc:
        lines.append(f"- The accuracy barrier (measured, not pre-registered) averaged {100 * np.mean(acc):.2f} points "
                     f"over its {len(acc)} measurements (largest {100 * max(acc):.2f}).")  # fmt: skip
    for a, b in same_curves(study):
        why = (" Under FedAvg this is expected: the anchored weights FedPNU does not upload are filled with the "
               "global values, which is what FedPFN's frozen anchors average to; the two differ in upload only."
               if {a, b} == {"fedpfn", "fedpnu-weight"} else "")  # fmt: skip
        lines.append(f"- {NAMES[a]} and {NAMES[b]} gave the same test accuracy in every round of every seed.{why}")
    return lines or ["- None."]


def family_table(rows: list[Row]) -> list[str]:
    lines = ["| comparison | mean difference (points; barrier: nats) | 95 % CI | p | p (Holm) | seeds higher | verdict |",
             "|---|---|---|---|---|---|---|"]  # fmt: skip
    for name, c in rows:
        unit = scale_of(name)[0]
        ci = "n/a" if c["low"] is None else f"[{unit * c['low']:+.3f}, {unit * c['high']:+.3f}]"
        p = "n/a" if c["p_value"] is None else f"{c['p_value']:.4f}"
        holm = "n/a" if c["p_holm"] is None else f"{c['p_holm']:.4f}"
        lines.append(f"| {name} | {unit * c['mean']:+.3f} | {ci} | {p} | {holm} | {c['wins']} of {len(c['diffs'])} | {c['verdict']} |")
    return lines


def grid_lines(study: Study) -> list[str]:
    lines = ["| skew | arm | " + " | ".join(f"lr {lr}" for lr in LR_GRID) + " | chosen |", "|---|---|" + "---|" * (len(LR_GRID) + 1)]
    for alpha, arms in study.grid_table().items():
        for arm, scores in arms.items():
            cells = " | ".join("collapsed" if s is None else f"{100 * s:.2f}" for s in scores.values())
            lines.append(f"| α={alpha} | {NAMES[arm]} | {cells} | {study.chosen_lr(alpha, arm)} |")
    return lines


def unfinished(study: Study) -> list[Path]:
    return [run for a in ALPHAS for arm in ARMS for s in SEEDS if not ((run := study.main_run(a, arm, s)) / SUMMARY).exists()]


def results(study: Study, figures: Path) -> list[str]:
    """The page below RESULTS, from the finished runs."""
    reports = {alpha: {name: report(study, alpha, name, figures) for name in REPORTS} for alpha in ALPHAS}
    primary, alignment = primary_family(reports), alignment_family(study)
    rounds = json.loads((study.main_run(ALPHAS[0], "fedavg", SEEDS[0]) / CONFIG).read_text())["rounds"]
    body = [RESULTS, "", f"The {study.model.upper()} version (100 clients, 10 a round, 5 local epochs, {rounds} rounds, "
            f"5 seeds), made by `python scripts/drift_study.py all --model {study.model}` and written by "
            f"`python scripts/drift_page.py --model {study.model}`.", "",
            "### Answers", "", *answers(primary, alignment), "",
            "### Observations (computed from the runs, not pre-registered)", "", *observations(study), "",
            "A verdict is what the Holm-adjusted p supports; 'not resolved' gives the difference these five "
            "seeds could have detected (80 % power, before Holm). Differences in accuracy points, barriers in nats.", "",
            "### Primary family: accuracy over the last 10 rounds (Holm across the four)", "", *family_table(primary), "",
            "### Alignment: mean over the run's measurements (Holm across the eight)", "",
            "Loss barrier in nats and fusion gap in accuracy points; lower is better aligned.", "",
            *family_table(alignment), "", "### Learning rates (validation accuracy, %, last 10 of the grid's rounds)", "",
            *grid_lines(study), ""]  # fmt: skip
    for alpha in ALPHAS:
        for name, result in reports[alpha].items():
            body += [f"### α = {alpha}: {REPORTS[name][1]}", "", result["markdown"].split("\n", 1)[1].strip(), ""]
    return body


def write_page(study: Study, page: Path = PAGE, figures: Path = FIGURES) -> None:
    """Replace `page`'s results with the finished runs' (its pre-registration stays as written)."""
    missing = unfinished(study)
    if missing:
        raise SystemExit(f"drift_page: {len(missing)} main runs are not finished (first: {missing[0]}); {page} is left as it is")
    head = page.read_text()
    if RESULTS not in head:
        raise SystemExit(f"drift_page: {page} has no '{RESULTS}' heading below its pre-registration; nothing written")
    page.write_text(head.split(RESULTS)[0] + "\n".join(results(study, figures)))
    print(f"wrote {page}")


def cli() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="mlp", help="the study's model: mlp (this machine's version) or cnn")
    write_page(Study(parser.parse_args().model))
    return 0


if __name__ == "__main__":
    sys.exit(cli())
