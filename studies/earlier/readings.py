"""The earlier study's page (its `page.readings`, READINGS below; studies/earlier/earlier.toml): what it reads
from the finished runs, and docs/results_earlier.md again from what it stored alone.

The study's cells are the learning-rate grid and the main comparison (FedAvg, FedPFN, FedPNU at
each skew). The follow-up comparisons (the anchor schedule, the servers and their learning-rate
grid, FedPNU's ratios, the anchors under servers) are studies of their own beside it
(`FOLLOW_UPS`), whose cells lie under the same `runs`; a comparison is reported whole once its
runs are finished, and listed as not yet run until then.

From the runs: a `fedpfn.analysis.report` per comparison (its JSON and Markdown in
`docs/study/<section>/`), the grid's scores, each comparison's commits and hours, and where the
page was made, kept in the stored file (`page.stored`). From the stored files alone: the page,
its answers read off the reports' paired 95 % intervals (studies.earlier.text).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import platform
from datetime import date
from pathlib import Path
from typing import Any

from fedpfn.analysis.paired_text import verdicts_printed
from fedpfn.analysis.report import main as report_main
from fedpfn.core.files import CONFIG, METRICS, SUMMARY, DamagedFile, atomic_write_bytes, is_finished, read_json, read_jsonl
from fedpfn.core.hyper import flat_view
from fedpfn.core.provenance import git_state
from fedpfn.study.cells import main_cells, points, scores
from fedpfn.study.places import MAX_TEMPLATE_BYTES, place_problem, read_place
from fedpfn.study.readings import Readings
from fedpfn.study.spec import Spec, load
from studies.earlier.text import (RATIOS, SERVER_ALPHA, SERVER_GRID, Comparison, comparisons, finished_results, in_short,
                                  page_lines)

FOLLOW_UPS = ("earlier-follow-ups.toml", "earlier-server-grid.toml", "earlier-anchors.toml")  # beside the study's file


def runs_score(spec: Spec, run: Path) -> float | None:
    """A finished grid run's score as the tuning's (the mean of its last rows' metric; None below the floor)."""
    assert spec.tune is not None
    found = [r[spec.tune.metric] for r in read_jsonl(run / METRICS) if r.get(spec.tune.metric) is not None]
    if not found:
        raise spec.refuse(f"{run} has no {spec.tune.metric}; was it run with a validation split?")
    window = found[-spec.tune.last :]
    value = sum(window) / len(window)
    return None if value < spec.tune.floor else value


def grid(spec: Spec) -> dict[str, dict[str, dict[str, float | None]]]:
    """alpha -> algorithm -> lr -> score, from the declared tuning cells."""
    found = scores(spec)
    if found is None or spec.tune is None:
        raise spec.refuse("the learning-rate grid's runs are not all finished; run the study first")
    values = spec.tune.values
    return {dict(p)["alpha"]: {arm: {v: found[arm, p, v] for v in values} for arm in spec.arms} for p in points(spec)}


def server_grid(spec: Spec) -> dict[str, dict[str, float | None]]:
    """server -> server lr -> score (FedAvg clients at the follow-ups' skew); a missing run refused."""
    found: dict[str, dict[str, float | None]] = {}
    for server, rates in SERVER_GRID.items():
        for rate in rates:
            run = spec.runs / "grid" / f"a{SERVER_ALPHA}" / f"{server}-slr{rate}" / "fedavg-s0"
            if not is_finished(run):
                raise spec.refuse(f"the server grid's run {run} is not finished (fedpfn study run "
                                  f"{spec.path.parent / FOLLOW_UPS[1]})")  # fmt: skip
            found.setdefault(server, {})[rate] = runs_score(spec, run)
    return found


def follow_up_runs(spec: Spec) -> dict[str, list[str]]:
    """Each follow-up folder (under the study's runs) -> its runs' names, from the follow-up studies
    declared beside the study's file (FOLLOW_UPS)."""
    found: dict[str, list[str]] = {}
    for name in FOLLOW_UPS:
        follow = load(spec.path.parent / name)
        for cell in main_cells(follow):
            relative = cell.folder.relative_to(follow.runs)
            found.setdefault(str(relative.parent), []).append(relative.name)
    return found


def finished(spec: Spec, folders: list[str]) -> bool:
    """Every run of every compared folder has its summary (a comparison is reported whole or not at all):
    a declared arm's have (the page is written once every cell is done), a follow-up's are read."""
    declared = {f"main-a{alpha}/{arm}" for alpha in spec.axes["alpha"] for arm in spec.arms}
    runs = follow_up_runs(spec)
    for folder in (f for f in folders if f not in declared):
        if folder not in runs:
            raise spec.refuse(f"the comparison folder {folder} is not a cell folder of {', '.join(FOLLOW_UPS)}")
        if not all(is_finished(spec.runs / folder / run) for run in runs[folder]):
            return False
    return True


def ratio_folders(spec: Spec) -> list[str]:
    """FedPNU's ratio folders by anchor ratio (its default's among them): the finished others, or all while none is."""
    others = [f"main-a{SERVER_ALPHA}/fedpnu-r{ratio}" for ratio in RATIOS]
    shown = [f for f in others if finished(spec, [f])] or others

    def ratio(folder: str) -> float:
        config = spec.runs / folder / "fedpnu-s0" / CONFIG
        return float(flat_view(read_json(config))["anchor_ratio"]) if config.is_file() else float("inf")

    return sorted([f"main-a{SERVER_ALPHA}/fedpnu", *shown], key=ratio)


def run_folders(report: dict[str, Any]) -> list[Path]:
    return [Path(run["path"]) for arm in report["arms"] for run in arm["runs"]]


def commits(report: dict[str, Any]) -> str:
    """The commits that made a comparison's runs, from their provenance ("not recorded": older runs)."""
    found = set()
    for run in run_folders(report):
        try:
            found.add(read_json(run / CONFIG)["provenance"]["git"]["commit"][:7])
        except (OSError, KeyError, TypeError, ValueError):
            found.add("not recorded")
    return ", ".join(sorted(found))


def report(spec: Spec, comparison: Comparison) -> dict[str, Any]:
    """`python -m fedpfn.analysis.report` over the comparison's folders, in this process; what the page keeps of it."""
    assert spec.page is not None
    out = spec.page.stored.parent / comparison.name
    folders = [str(spec.runs / f) for f in comparison.folders]
    argv = [*folders, "--baseline", comparison.baseline, "--out", str(out)]
    with contextlib.redirect_stdout(io.StringIO()):
        code = report_main(argv)
    if code:
        raise spec.refuse(f"the report of {out} failed (exit {code})")
    made = read_json(out / "report.json")
    hours = sum(read_json(run / SUMMARY)["wall_seconds"] for run in run_folders(made)) / 3600
    return {"name": comparison.name, "shell": "python -m fedpfn.analysis.report " + " ".join(argv),
            "commits": commits(made), "hours": hours}  # fmt: skip


def write_stored(spec: Spec) -> None:
    """From the finished runs: every finished comparison's report, and the page's data in the stored file."""
    assert spec.page is not None
    data: dict[str, Any] = {
        "made": {"machine": platform.machine(), "cores": os.cpu_count(),
                 "commit": ((git_state() or {}).get("commit") or "unknown")[:7], "date": str(date.today())},
        "grid": grid(spec), "server_grid": server_grid(spec), "sections": [],
        "source": f"the runs under {spec.runs}, read by fedpfn study page {spec.path}",
    }  # fmt: skip
    data["ratio_folders"] = ratio_folders(spec)
    for comparison in comparisons(spec, data["ratio_folders"]):
        if finished(spec, list(comparison.folders)):  # the others are listed as not yet run
            data["sections"].append(report(spec, comparison))
    others = [f"main-a{SERVER_ALPHA}/fedpnu-r{ratio}" for ratio in RATIOS]
    if any(finished(spec, [f]) for f in others):  # one ratio finished: the others are listed as not yet run
        data["pending_ratios"] = [f for f in others if not finished(spec, [f])]
    spec.page.stored.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(spec.page.stored, (json.dumps(data, indent=1, ensure_ascii=False) + "\n").encode())


def stored_reports(spec: Spec) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """The stored page data and each kept section's report (its JSON and Markdown), by section name."""
    assert spec.page is not None
    data = spec.stored_results()
    reports = {}
    for kept in data["sections"]:
        if (problem := place_problem(str(kept["name"]), "page.stored: sections[].name")) is not None:
            raise spec.refuse(problem)  # a stored file naming '../..' reads nothing outside
        out = spec.page.stored.parent / kept["name"]
        try:
            markdown = read_place(out / "report.md", "page.stored", MAX_TEMPLATE_BYTES)
            reports[kept["name"]] = {**read_json(out / "report.json"), "markdown": markdown}
        except DamagedFile as err:
            raise spec.refuse(str(err)) from None
        except OSError as err:
            raise spec.refuse(f"{out}: {err.strerror}") from None
    return data, reports


def section(spec: Spec) -> list[str]:
    """The page's results from the stored files alone."""
    return page_lines(spec, *stored_reports(spec))


def summary(spec: Spec) -> list[str]:
    """The page's answer in short, for its top (`<!-- study: earlier-summary -->`), from the same files. Its
    verdicts are one Holm family's over the sections' comparisons, so they stay out of the page's list of
    verdicts the rule changed, which reads each section's own (as when *In short* came after them)."""
    with verdicts_printed():
        return in_short(finished_results(spec, *stored_reports(spec)))[:-1]  # the template's blank line follows


READINGS = Readings(keep=write_stored, sections={"earlier": section, "earlier-summary": summary})  # studies/earlier/earlier.toml's
