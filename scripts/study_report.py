#!/usr/bin/env python
"""docs/results.md from the study's run folders, through `python -m fedpfn.report` only.

    python scripts/study_report.py [RUNS]      # default RUNS: runs/study (scripts/study.py's)

Every table is a `fedpfn.report` output, printed with the command that made it; the
conclusions are read off the paired 95 % intervals (an interval that holds 0 is a null
result, stated as one). Figures and reports go to docs/study/<section>/.
"""

from __future__ import annotations

import json
import platform
import subprocess
import sys
from datetime import date
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
sys.path.insert(0, str(ROOT / "scripts"))

from study import ALGORITHMS, ALPHAS, LR_GRID, SERVER_ALPHA, SERVER_GRID, _score  # noqa: E402


def report(runs: Path, section: str, folders: list[str], baseline: str) -> dict:
    """Run fedpfn.report on `folders` (under `runs`) into docs/study/<section>; its JSON and text."""
    out = DOCS / "study" / section
    paths = [str((runs / f).relative_to(ROOT)) if (runs / f).is_relative_to(ROOT) else str(runs / f) for f in folders]
    cmd = [sys.executable, "-m", "fedpfn.report", *paths, "--baseline", baseline, "--out", str(out.relative_to(ROOT))]
    subprocess.run(cmd, cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
    result = json.loads((out / "report.json").read_text())
    result["markdown"] = (out / "report.md").read_text()
    result["shell"] = "python -m fedpfn.report " + " ".join(cmd[3:])
    result["section"] = section
    return result


def wall_hours(result: dict) -> float:
    seconds = 0.0
    for arm in result["arms"]:
        for run in arm["runs"]:
            seconds += json.loads((ROOT / run["path"] / "summary.json").read_text())["wall_seconds"]
    return seconds / 3600


def verdicts(result: dict) -> list[str]:
    """One plain sentence per arm and metric: what the paired interval supports."""
    lines = []
    for p in result["paired"]:
        if p["low"] is None:
            continue
        what = "final accuracy" if p["metric"] == "final" else f"accuracy over the {result['window']}"
        gap = f"{100 * p['mean']:+.2f} points (95 % CI {100 * p['low']:+.2f} to {100 * p['high']:+.2f}; wins {p['wins']})"
        if p["low"] > 0:
            claim = "higher than"
        elif p["high"] < 0:
            claim = "lower than"
        else:
            claim = "not resolved from"
        lines.append(f"- {p['label']}: {what} {claim} {result['baseline']}: {gap}.")
    return lines


def section(result: dict, heading: str, intro: str) -> list[str]:
    rel = f"study/{result['section']}"
    return [
        f"## {heading}",
        "",
        intro,
        "",
        f"Command: `{result['shell']}` (runs made by `python scripts/study.py`; "
        f"{wall_hours(result):.1f} h of simulation in total).",
        "",
        result["markdown"].strip(),
        "",
        "What the intervals support:",
        "",
        *verdicts(result),
        "",
        f"![curves]({rel}/report.png) ![paired differences]({rel}/paired_differences.png)",
        "",
    ]


def grid_section(runs: Path) -> list[str]:
    """The learning-rate grid on the validation split: scores, choices and divergences."""
    lines = ["## Learning rates, chosen on a validation split", "",
             "Each algorithm's local learning rate was picked per skew from "
             f"{', '.join(LR_GRID)} by the mean validation accuracy of the last two evaluated rounds "
             "(rounds 12 and 15 of 15; seed 0; 10 % of the training set held out, never the test set). "
             "A run whose score fell below 0.2 (chance is 0.1) counts as diverged.", "",
             "| alpha | algorithm | " + " | ".join(f"lr {lr}" for lr in LR_GRID) + " | chosen |",
             "|---|---|" + "---|" * len(LR_GRID) + "---|"]
    diverged = total = 0
    for alpha in ALPHAS:
        for algorithm in ALGORITHMS:
            cells = []
            for lr in LR_GRID:
                score = _score(runs / "grid" / f"a{alpha}" / f"lr{lr}" / f"{algorithm}-s0")
                total += 1
                diverged += score is None
                cells.append("diverged" if score is None else f"{100 * score:.2f}")
            best = max(LR_GRID, key=lambda lr: _score(runs / "grid" / f"a{alpha}" / f"lr{lr}" / f"{algorithm}-s0") or 0)
            lines.append(f"| {alpha} | {algorithm} | " + " | ".join(cells) + f" | {best} |")
    lines += ["", f"{diverged} of {total} grid runs diverged.", "", "Server learning rates (FedAvg clients, "
              f"Dirichlet {SERVER_ALPHA}, same protocol):", "", "| server | server lr | validation accuracy |", "|---|---|---|"]
    for server, lrs in SERVER_GRID.items():
        for slr in lrs:
            score = _score(runs / "grid" / f"a{SERVER_ALPHA}" / f"{server}-slr{slr}" / "fedavg-s0")
            lines.append(f"| {server} | {slr} | {'diverged' if score is None else f'{100 * score:.2f}'} |")
    return lines + [""]


def main() -> int:
    runs = Path(sys.argv[1]).resolve() if len(sys.argv) > 1 else ROOT / "runs" / "study"
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout
    a = SERVER_ALPHA
    parts = [
        "# Results: does training-time alignment help federated learning here?",
        "",
        "Fashion-MNIST, the paper's CNN, 20 clients with 10 sampled a round, 30 rounds, 5 seeds "
        "(a seed fixes the partition, the sampling and the initial model, so arms are compared seed by "
        "seed). Accuracy is test accuracy in percent; ± is the sample standard deviation over seeds "
        "(n-1); intervals are 95 % Student-t intervals of the mean paired difference over seeds.",
        "",
        f"Made on {platform.machine()} with {__import__('os').cpu_count()} cores, no GPU, shared with "
        f"other jobs; code at commit {commit.strip() or 'unknown'}; written {date.today()}. Regenerate "
        "everything with `python scripts/study.py all` (the runs, restartable) and this page alone with "
        "`python scripts/study_report.py`.",
        "",
        *grid_section(runs),
    ]
    for alpha in ALPHAS:
        result = report(runs, f"main-a{alpha}", [f"main-a{alpha}/{x}" for x in ALGORITHMS], "fedavg")
        parts += section(result, f"FedAvg, FedPFN, FedPNU at Dirichlet {alpha}",
                         "Each algorithm at its chosen learning rate; FedAvg's server.")
    result = report(runs, "schedule", [f"main-a{a}/fedpfn", f"main-a{a}/fedpfn-fixed"], "fedpfn")
    parts += section(result, f"Anchor schedule (FedPFN, Dirichlet {a})",
                     "`round`: a new mask every round, anchored at the received model; `fixed`: one mask, "
                     "anchored at the initial weights, for the whole run.")
    for server in SERVER_GRID:
        result = report(runs, f"server-{server}", [f"servers-a{a}/fedavg-{server}", f"servers-a{a}/fedpfn-{server}"],
                        "fedavg")
        parts += section(result, f"FedPFN under {server} (Dirichlet {a})",
                         f"The compatibility claim: {server} alone against FedPFN with {server}, same server settings.")
    result = report(runs, "fedpnu-ratios",
                    [f"main-a{a}/fedavg", f"main-a{a}/fedpnu", f"main-a{a}/fedpnu-r0.2", f"main-a{a}/fedpnu-r0.6"], "fedavg")
    parts += section(result, f"FedPNU: upload saved against accuracy (Dirichlet {a})",
                     "FedPNU uploads only the neurons it trained: about 1 - rho of FedAvg's bytes (MB columns).")
    for server in ("fedavgm", "fedadam"):
        base = runs / "anchors-server" / server
        result = report(runs, f"anchors-{server}", [str(p.relative_to(runs)) for p in
                        (base / "plain", base / "round-keep", base / "round-reset", base / "fixed")], "fedavg")
        parts += section(result, f"Anchored entries under {server}: the variants (MLP, 3 seeds)",
                         "Issue 11's semantics. `round` + keep (default): the server optimizer's own step on "
                         "anchored entries stands; `round` + reset: anchored entries written back to their anchor "
                         "values; `fixed`: one mask, the initial weights, all run.")
    (DOCS / "results.md").write_text("\n".join(parts))
    print(f"wrote {DOCS / 'results.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
