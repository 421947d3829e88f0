"""docs/results.md's results, from the drift study's finished runs (scripts/drift_study.py page).

The page keeps its pre-registration (everything above `## Results`) and replaces what follows
with: the answers to the pre-registered questions, the primary family Holm-adjusted across
the page, the alignment family, the learning-rate grid, and per skew the tables of
`python -m fedpfn.analysis.report` (each with its command; figures in docs/study/drift-*/).
Nothing is written unless every main run is finished: a page reports finished runs only.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from drift_study import ALPHAS, ARMS, LR_GRID, ROOT, SEEDS
from fedpfn.analysis.render import verdict
from fedpfn.analysis.stats import Paired, adjust, paired
from fedpfn.core.files import METRICS, SUMMARY, read_jsonl

if TYPE_CHECKING:
    from drift_study import Study

PAGE = ROOT / "docs" / "results.md"
RESULTS = "## Results"
NAMES = {
    "fedavg": "FedAvg", "fedpfn": "FedPFN", "fedpfn-fixed": "FedPFN fixed", "fedpfn-client": "control (client masks)",
    "fedpnu-weight": "FedPNU weight", "fedpnu-neuron": "FedPNU neuron",
}  # fmt: skip
ALIGNMENT = ("align_loss_barrier", "align_fusion_gap")


def report(study: Study, alpha: str, arms: list[str], name: str) -> dict[str, Any]:
    """fedpfn.analysis.report over `arms`' main runs at `alpha` (the first arm the baseline)."""
    out = ROOT / "docs" / "study" / f"drift-{study.model}-a{alpha}-{name}"
    folders = [str(study.main_run(alpha, arm, 0).parent.relative_to(ROOT)) for arm in arms]
    cmd = [sys.executable, "-m", "fedpfn.analysis.report", *folders, "--last-k", "10", "--out", str(out.relative_to(ROOT))]
    subprocess.run(cmd, cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
    result = json.loads((out / "report.json").read_text())
    result["markdown"] = (out / "report.md").read_text()
    result["shell"] = "python -m fedpfn.analysis.report " + " ".join(cmd[3:])
    return result


def lastk_comparison(result: dict[str, Any], arm_index: int) -> dict[str, Any]:
    """The report's last-k comparison of its `arm_index`-th arm against its baseline."""
    label = result["arms"][arm_index]["arm"]
    return next(p for p in result["paired"] if p["label"] == label and p["metric"] == "lastk")


def alignment_means(study: Study, alpha: str, arm: str, key: str) -> dict[int, float]:
    """Seed -> the run's mean of `key` over its alignment measurements."""
    out = {}
    for seed in SEEDS:
        values = [r[key] for r in read_jsonl(study.main_run(alpha, arm, seed) / METRICS) if r.get(key) is not None]
        out[seed] = float(np.mean(values))
    return out


def alignment_family(study: Study) -> list[Paired]:
    """FedPFN − FedAvg and FedPFN − control of each alignment figure at each skew, Holm-adjusted together."""
    family = []
    for alpha in ALPHAS:
        for key in ALIGNMENT:
            ours = alignment_means(study, alpha, "fedpfn", key)
            for base in ("fedavg", "fedpfn-client"):
                label = f"α={alpha} {key.removeprefix('align_')}: FedPFN − {NAMES[base]}"
                family.append(paired(label, "alignment", ours, alignment_means(study, alpha, base, key)))
    adjust(family)
    return family


def primary_family(reports: dict[str, dict[str, dict]]) -> list[tuple[str, dict[str, Any]]]:
    """FedPFN − FedAvg and FedPFN − control at both skews, their p Holm-adjusted across the four."""
    rows = []
    for alpha in ALPHAS:
        rows.append((f"α={alpha}: FedPFN − FedAvg", lastk_comparison(reports[alpha]["all"], list(ARMS).index("fedpfn"))))
        rows.append((f"α={alpha}: FedPFN − control", lastk_comparison(reports[alpha]["control"], 1)))
    comparisons = [Paired(**{k: v for k, v in c.items() if k in Paired.__dataclass_fields__}) for _, c in rows]
    adjust(c for c in comparisons)
    return [(name, {**c.__dict__, "verdict": verdict(c)}) for (name, _), c in zip(rows, comparisons)]


def answers(primary: list[tuple[str, dict[str, Any]]], alignment: list[tuple[str, dict[str, Any]]]) -> list[str]:
    """The pre-registered questions, each answered by its comparisons' verdicts (nothing else)."""

    def said(rows: list[tuple[str, dict[str, Any]]], needle: str) -> str:
        return "; ".join(f"{name}: {c['verdict']} ({unit_of(name) * c['mean']:+.2f})" for name, c in rows if needle in name)

    return [
        f"1. FedPFN against FedAvg — {said(primary, 'FedAvg')}.",
        f"2. FedPFN against the control (as much freezing, nothing shared) — {said(primary, 'control')}.",
        f"3. Misalignment, FedPFN against FedAvg — {said(alignment, 'FedAvg')}.",
        f"   FedPFN against the control — {said(alignment, 'control')}.",
    ]


def unit_of(name: str) -> float:
    """Accuracy figures in points; a loss barrier (nats) as it is."""
    return 1.0 if "loss_barrier" in name else 100.0


def family_table(rows: list[tuple[str, dict[str, Any]]]) -> list[str]:
    lines = ["| comparison | mean difference (points; barrier: nats) | 95 % CI | p | p (Holm) | seeds higher | verdict |",
             "|---|---|---|---|---|---|---|"]  # fmt: skip
    for name, c in rows:
        unit = unit_of(name)
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


def write_page(study: Study) -> None:
    missing = unfinished(study)
    if missing:
        raise SystemExit(f"drift_page: {len(missing)} main runs are not finished (first: {missing[0]}); the page is left as it is")
    reports = {
        alpha: {"all": report(study, alpha, list(ARMS), "all"), "control": report(study, alpha, ["fedpfn-client", "fedpfn"], "control")}
        for alpha in ALPHAS
    }  # fmt: skip
    primary = primary_family(reports)
    alignment = [(p.label, {**p.__dict__, "verdict": verdict(p)}) for p in alignment_family(study)]
    head = PAGE.read_text().split(RESULTS)[0]
    body = [RESULTS, "", f"The {study.model.upper()} version (100 clients, 10 a round, 5 local epochs, {study.rounds} rounds, "
            "5 seeds), made by `python scripts/drift_study.py all` and written by `python scripts/drift_study.py page`.", "",
            "### Answers", "", *answers(primary, alignment), "",
            "A verdict is what the Holm-adjusted interval supports; 'not resolved' gives the difference these five "
            "seeds could have detected (80 % power, before Holm).", "",
            "### Primary family: accuracy over the last 10 rounds (Holm across the four)", "", *family_table(primary), "",
            "### Alignment: mean over the run's measurements (Holm across the eight)", "",
            "Loss barrier in nats and fusion gap in accuracy points; lower is better aligned.", "",
            *family_table(alignment), "", "### Learning rates (validation accuracy, %, last 10 of the grid's rounds)", "",
            *grid_lines(study), ""]  # fmt: skip
    for alpha in ALPHAS:
        for name, result in reports[alpha].items():
            body += [f"### α = {alpha}: {'every arm against FedAvg' if name == 'all' else 'FedPFN against the control'}", "",
                     f"`{result['shell']}`", "", result["markdown"].split("\n", 1)[1], ""]  # fmt: skip
    PAGE.write_text(head + "\n".join(body))
