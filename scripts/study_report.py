#!/usr/bin/env python
"""docs/results_earlier.md from the study's run folders, through `python -m fedpfn.analysis.report` only.

    python scripts/study_report.py [RUNS]      # default RUNS: runs/study (scripts/study.py's)

A page is never replaced by one that reports less: where RUNS lacks the finished runs of a
section docs/results_earlier.md reports (a fresh clone has none), the page is left as it is, the
script says so and exits 1.

Every table is a `fedpfn.analysis.report` output, printed with the command that made it; the
conclusions are read off the paired 95 % intervals (an interval that holds 0 is a null
result, stated as one). Figures and reports go to docs/study/<section>/.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from datetime import date
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
sys.path.insert(0, str(ROOT / "scripts"))
sys.path.insert(0, str(ROOT))

from fedpfn.core.files import COMPARISON_CONFIG, CONFIG, SUMMARY  # noqa: E402
from fedpfn.core.hyper import flat_view  # noqa: E402  (fedpnu.anchor_ratio, or anchor_ratio in older runs)
from fedpfn.core.flags import OneLineParser  # noqa: E402
from study import ALGORITHMS, ALPHAS, LR_GRID, RATIOS, SERVER_ALPHA, SERVER_GRID, _score  # noqa: E402


def report(runs: Path, section: str, folders: list[str], baseline: str) -> dict:
    """Run fedpfn.analysis.report on `folders` (under `runs`) into docs/study/<section>; its JSON and text."""
    out = DOCS / "study" / section
    paths = [str((runs / f).relative_to(ROOT)) if (runs / f).is_relative_to(ROOT) else str(runs / f) for f in folders]
    cmd = [sys.executable, "-m", "fedpfn.analysis.report", *paths, "--baseline", baseline, "--out", str(out.relative_to(ROOT))]
    subprocess.run(cmd, cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
    result = json.loads((out / "report.json").read_text())
    result["markdown"] = (out / "report.md").read_text()
    result["shell"] = "python -m fedpfn.analysis.report " + " ".join(cmd[3:])
    result["section"] = section
    return result


def run_folders(result: dict) -> list[Path]:
    return [ROOT / run["path"] for arm in result["arms"] for run in arm["runs"]]


def commits(result: dict) -> str:
    """The commits that made the runs, from their config.json's provenance ("not recorded": older runs)."""
    found = set()
    for run in run_folders(result):
        try:
            found.add(json.loads((run / CONFIG).read_text())["provenance"]["git"]["commit"][:7])
        except (OSError, KeyError, TypeError, ValueError):
            found.add("not recorded")
    return ", ".join(sorted(found))


def wall_hours(result: dict) -> float:
    seconds = sum(json.loads((run / SUMMARY).read_text())["wall_seconds"] for run in run_folders(result))
    return seconds / 3600


CLAIMS = ("higher than", "lower than", "not resolved from")
GRID_HEADING = "Learning rates, chosen on a validation split"


def claim(paired: dict) -> str:
    """What a paired interval supports: one of CLAIMS."""
    if paired["low"] > 0:
        return CLAIMS[0]
    return CLAIMS[1] if paired["high"] < 0 else CLAIMS[2]


def verdicts(result: dict, final: bool = True) -> list[str]:
    """One plain sentence per arm and metric (without `final`: the last-rounds mean only)."""
    lines = []
    for p in result["paired"]:
        if p["low"] is None or (p["metric"] == "final" and not final):
            continue
        what = "final accuracy" if p["metric"] == "final" else f"accuracy over the {result['window']}"
        gap = (f"{100 * p['mean']:+.2f} points (95 % CI {100 * p['low']:+.2f} to {100 * p['high']:+.2f}; "
               f"higher on {p['wins']} of {len(p['diffs'])} seeds)")
        lines.append(f"- {p['label']}: {what} {claim(p)} {result['baseline']}: {gap}.")
    return lines


def arm_runs(result: dict, label: str) -> tuple[str, ...]:
    """The run folders behind one arm of a comparison: two sections may compare the very same runs."""
    return tuple(sorted(run["path"] for arm in result["arms"] if arm["arm"] == label for run in arm["runs"]))


def in_short(results: list[tuple[str, dict]], seeds: int = 5) -> list[str]:
    """The page's conclusion: every arm compared over `seeds` or more, grouped by what its interval supports.

    Two sections that compare the very same runs against the very same baseline runs (FedPNU at
    its default ratio: the main comparison and the ratio sweep) make one entry naming both.
    """
    if not results:
        return []  # nothing finished: the page lists every comparison as not yet run
    entries: dict[tuple, tuple[str, str, list[str]]] = {}  # runs compared -> (claim, gap, where)
    for heading, result in results:
        for p in result["paired"]:
            if p["metric"] == "final" or p["low"] is None or len(p["diffs"]) < seeds:
                continue
            runs = arm_runs(result, p["label"])
            same = (runs, arm_runs(result, result["baseline"])) if runs else (heading, p["label"])
            if same in entries:
                entries[same][2].append(f"*{heading}* as {p['label']}")
            else:
                entries[same] = (claim(p), f"{100 * p['mean']:+.2f}", [f"{p['label']} in *{heading}*"])
    groups: dict[str, list[str]] = {c: [] for c in CLAIMS}
    for verdict, gap, where in entries.values():
        groups[verdict].append(f"{' and '.join(where)} ({gap})")
    return [f"**In short** (accuracy over the last rounds, every comparison with {seeds} seeds; "
            "the paired difference from the section's baseline in points):", "",
            *(f"- {c} the baseline: {'; '.join(found) or 'none'}." for c, found in groups.items()), ""]


def report_body(markdown: str) -> list[str]:
    """fedpfn.analysis.report's Markdown under a section of this page: its title as the setting, no repeated command."""
    lines = []
    for line in markdown.strip().splitlines():
        if line.startswith("## "):
            lines.append(f"Setting: {line[3:]}.")
        elif not line.startswith("Command:"):
            lines.append(line)
    return lines


def section(result: dict, heading: str, intro: str) -> list[str]:
    rel = f"study/{result['section']}"
    return [
        f"## {heading}",
        "",
        intro,
        "",
        f"Command: `{result['shell']}` (runs made by `python scripts/study.py` at commit {commits(result)}; "
        f"{wall_hours(result):.1f} h of simulation in total).",
        "",
        *report_body(result["markdown"]),
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
    lines = [f"## {GRID_HEADING}", "",
             "Each algorithm's local learning rate was picked per skew from "
             f"{', '.join(LR_GRID)} by the mean validation accuracy of the last two evaluated rounds "
             "(rounds 12 and 15 of 15; seed 0; 10 % of the training set held out, never the test set). "
             "A run whose score fell below 0.2 (chance is 0.1) counts as diverged.", "",
             "| alpha | algorithm | " + " | ".join(f"lr {lr}" for lr in LR_GRID) + " | chosen |",
             "|---|---|" + "---|" * len(LR_GRID) + "---|"]
    diverged = total = 0
    at_edge: list[str] = []
    for alpha in ALPHAS:
        for algorithm in ALGORITHMS:
            scores = {lr: _score(runs / "grid" / f"a{alpha}" / f"lr{lr}" / f"{algorithm}-s0") for lr in LR_GRID}
            total += len(scores)
            diverged += sum(score is None for score in scores.values())
            cells = ["diverged" if score is None else f"{100 * score:.2f}" for score in scores.values()]
            best = max(LR_GRID, key=lambda lr: scores[lr] or 0)
            if best in (LR_GRID[0], LR_GRID[-1]):
                at_edge.append(f"{algorithm} at Dirichlet {alpha} (lr {best})")
            lines.append(f"| {alpha} | {algorithm} | " + " | ".join(cells) + f" | {best} |")
    lines += ["", f"{diverged} of {total} grid runs diverged."]
    if at_edge:
        lines.append("Chosen at an end of the grid, so the best rate may lie beyond it: " + ", ".join(at_edge) + ".")
    lines += ["", "Server learning rates (FedAvg clients, "
              f"Dirichlet {SERVER_ALPHA}, same protocol):", "", "| server | server lr | validation accuracy |", "|---|---|---|"]
    chosen = []
    for server, lrs in SERVER_GRID.items():
        scores = {slr: _score(runs / "grid" / f"a{SERVER_ALPHA}" / f"{server}-slr{slr}" / "fedavg-s0") for slr in lrs}
        for slr, score in scores.items():
            lines.append(f"| {server} | {slr} | {'diverged' if score is None else f'{100 * score:.2f}'} |")
        best = max(lrs, key=lambda slr: scores[slr] or 0)
        chosen.append(f"{server} {best}" + (" (an end of its grid)" if best in (lrs[0], lrs[-1]) else ""))
    return lines + ["", "Chosen: " + ", ".join(chosen) + ".", ""]


def finished(runs: Path, folders: list[str]) -> bool:
    """Every run of every compared folder has its summary (a comparison is reported whole or not at all)."""
    for folder in folders:
        config = runs / folder / COMPARISON_CONFIG
        if not config.is_file():
            return False
        settings = json.loads(config.read_text())
        for algorithm in settings["algorithms"]:
            if not all((runs / folder / f"{algorithm}-s{s}" / SUMMARY).is_file() for s in settings["seeds"]):
                return False
    return True


def comparisons(runs: Path) -> list[tuple[str, list[str], str, str, str]]:
    """(section, folders, baseline, heading, intro) of every comparison of the study, in page order."""
    a = SERVER_ALPHA
    found = [
        (f"main-a{alpha}", [f"main-a{alpha}/{x}" for x in ALGORITHMS], "fedavg",
         f"FedAvg, FedPFN, FedPNU at Dirichlet {alpha}", "Each algorithm at its chosen learning rate; FedAvg's server.")
        for alpha in ALPHAS
    ]
    found.append(("schedule", [f"main-a{a}/fedpfn", f"main-a{a}/fedpfn-fixed"], "fedpfn anchor_schedule=round",
                  f"Anchor schedule (FedPFN, Dirichlet {a})",
                  "`round`: a new mask every round, anchored at the received model; `fixed`: one mask, "
                  "anchored at the initial weights, for the whole run."))
    for server in SERVER_GRID:
        found.append((f"server-{server}", [f"servers-a{a}/fedavg-{server}", f"servers-a{a}/fedpfn-{server}"], "fedavg",
                      f"FedPFN under {server} (Dirichlet {a})",
                      f"The compatibility claim: {server} alone (the arm `fedavg`: FedAvg clients under {server}) "
                      f"against FedPFN with {server}, same server settings."))
    ratios = sorted([f"main-a{a}/fedpnu", *ratio_arms(runs)], key=lambda folder: anchor_ratio(runs, folder))
    found.append(("fedpnu-ratios", [f"main-a{a}/fedavg", *ratios], "fedavg", f"FedPNU: upload saved against accuracy (Dirichlet {a})",
                  "FedPNU uploads only the neurons it trained: about 1 - rho of FedAvg's bytes (MB columns)."))
    for server in ("fedavgm", "fedadam"):
        found.append((f"anchors-{server}", [f"anchors-server/{server}/{v}" for v in VARIANTS], "fedavg",
                      f"Anchored entries under {server}: the variants (MLP, 3 seeds)",
                      f"Issue 11's semantics; the arm `fedavg` is FedAvg clients under {server} without anchors. "
                      "`round` + keep (default): the server optimizer's own step on "
                      "anchored entries stands; `round` + reset: anchored entries written back to their anchor "
                      "values; `fixed`: one mask, the initial weights, all run. Read it as " + ANCHORS_CAVEAT))
    return found


def ratio_arms(runs: Path) -> list[str]:
    """The other anchor ratios' folders: those finished, or all of them while none is.

    Each ratio is a whole 5-seed arm against the same FedAvg runs, so a finished one is
    reported while another is still running (which is then listed as not yet run).
    """
    folders = ratio_folders()
    return [f for f in folders if finished(runs, [f])] or folders


def anchor_ratio(runs: Path, folder: str) -> float:
    """The anchor ratio of a FedPNU folder's runs (inf before its first run has started)."""
    config = runs / folder / "fedpnu-s0" / CONFIG
    return flat_view(json.loads(config.read_text()))["anchor_ratio"] if config.is_file() else float("inf")


def ratio_folders() -> list[str]:
    return [f"main-a{SERVER_ALPHA}/fedpnu-r{ratio}" for ratio in RATIOS]


def unfinished_ratios(runs: Path) -> list[str]:
    folders = ratio_folders()
    if not any(finished(runs, [f]) for f in folders):
        return []  # the whole comparison is pending, listed as such
    return [f"- FedPNU at anchor ratio {f.rsplit('-r', 1)[1]}: `{f}`" for f in folders if not finished(runs, [f])]


VARIANTS = ("plain", "round-keep", "round-reset", "fixed")
ANCHORS_CAVEAT = ("an exploratory check, not an answer: the MLP, 3 seeds, and the server learning rates issue 11 "
                  "fixed (FedAvgM 1.0, FedAdam 0.01) rather than rates tuned per arm, so it is left out of *In short*.")
POINTERS = [
    "## Cost of the anchors",
    "",
    "See `benchmarks/bench_anchors.py` and [benchmarks/README.md](../benchmarks/README.md): FedPFN's local "
    "training time over FedAvg's on the same data, measured in one process run.",
    "",
    "## Alignment: barriers and fusion",
    "",
    "Linear-mode-connectivity barriers and multi-model fusion with anchor ratios 0, 0.2, 0.4, 0.6 on the MLP "
    "and the CNN are in [lmc.md](lmc.md).",
    "",
]


def parse_runs(argv: list[str] | None = None) -> Path:
    """The study's run folder: RUNS as given (it must be a folder), else runs/study (which may be absent)."""
    parser = OneLineParser(prog="study_report.py", description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("runs", nargs="?", metavar="RUNS", help="the study's runs (default: runs/study, "
                        "scripts/study.py's); the page is left as it is where they lack a section it reports")  # fmt: skip
    given = parser.parse_args(argv).runs
    if given is not None and not Path(given).is_dir():
        parser.error(f"RUNS {given!r} is not a folder; give the folder of scripts/study.py's runs")
    return Path(given).resolve() if given is not None else ROOT / "runs" / "study"


def main(argv: list[str] | None = None) -> int:
    runs = parse_runs(argv)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout
    parts = [
        "# Results: does training-time alignment help federated learning here?",
        "",
        "Fashion-MNIST, the paper's CNN, 20 clients with 10 sampled a round, 30 rounds, 5 seeds "
        "(a seed fixes the partition, the sampling and the initial model, so arms are compared seed by "
        "seed). Accuracy is test accuracy in percent; ± is the sample standard deviation over seeds "
        "(n-1); intervals are 95 % Student-t intervals of the mean paired difference over seeds.",
        "",
        f"Made on {platform.machine()} with {os.cpu_count()} cores, no GPU, shared with "
        f"other jobs; page written at commit {commit.strip() or 'unknown'} on {date.today()}. Runs whose "
        "commit is not recorded were made before config.json kept provenance, at commit d3e3239 "
        "(branch study-base: 5a92930 with the validation split), whose numbers equal main's "
        "(`scripts/reference_metrics.py --compare`). Regenerate "
        "everything with `python scripts/study.py all` (the runs, restartable) and this page alone with "
        "`python scripts/study_report.py`.",
        "",
    ]
    pending, body, answers, results = [], [], [], []
    grid_runs = [run for alpha in ALPHAS for lr in LR_GRID for run in
                 (runs / "grid" / f"a{alpha}" / f"lr{lr}" / f"{x}-s0" for x in ALGORITHMS)]
    if all((run / SUMMARY).is_file() for run in grid_runs):
        body += grid_section(runs)
    else:
        pending.append("- the learning-rate grid: `grid/`")
    for name, folders, baseline, heading, intro in comparisons(runs):
        if finished(runs, folders):
            result = report(runs, name, folders, baseline)
            results.append((heading, result))
            body += section(result, heading, intro)
            answers += [f"- **{heading}**", *(f"  {line}" for line in verdicts(result, final=False))]
            if name.startswith("anchors-"):
                answers.append(f"  - Caveat: {ANCHORS_CAVEAT}")
        else:
            pending.append(f"- {heading}: `{', '.join(folders)}`")
            answers.append(f"- **{heading}**: not yet run.")
    pending += unfinished_ratios(runs)
    parts += ["## Answers", "", *in_short(results),
              "What the paired intervals over seeds support, comparison by comparison "
              "(accuracy averaged over the last rounds; the sections below give the final round too):", "",
              *answers, "", *body]
    if pending:
        parts += ["## Not yet run", "",
                  "These comparisons' runs are not finished, so this page says nothing about them; "
                  "`python scripts/study.py all` continues the study where it stopped:", "", *pending, ""]
    return write_page("\n".join(parts + POINTERS), runs, len(pending))


def write_page(text: str, runs: Path, pending: int) -> int:
    """Write docs/results_earlier.md, unless the page there reports a section this one would lose.

    A page is made from finished runs only; runs that are not here (a fresh clone, another
    machine, a moved folder) must not turn a page of results into one of pending comparisons.
    """
    page = DOCS / "results_earlier.md"
    old = page.read_text() if page.exists() else ""
    headings = [GRID_HEADING, *(heading for _, _, _, heading, _ in comparisons(runs))]
    lost = [h for h in headings if f"\n## {h}\n" in old and f"\n## {h}\n" not in text]
    if lost:
        more = f" and {len(lost) - 1} more" if len(lost) > 1 else ""
        print(f"{page} left unchanged: it reports sections whose finished runs are not under {runs} "
              f"('{lost[0]}'{more}); give the folder of the study's runs: python scripts/study_report.py RUNS",
              file=sys.stderr)  # fmt: skip
        return 1
    page.write_text(text)
    print(f"wrote {page}" + (f" ({pending} comparisons pending)" if pending else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
