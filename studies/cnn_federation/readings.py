"""The CNN federation pilot's page (its `page.readings`, PILOT below; studies/cnn_federation/pilot.toml).

The pilot runs FedAvg alone, long, to choose the main study's number of rounds R and to time a
round (the rule is studies/cnn_federation/pilot.md's, written before the runs). `keep` reads each
finished cell's test accuracy per round, its CPU seconds (the study runner's TIMES) and its
provenance into the page's stored file; the sections apply the rule to that file alone, so
`page --stored` writes the same bytes.
"""

from __future__ import annotations

import json
from typing import Any

from fedpfn.analysis.markup import table
from fedpfn.core.files import CONFIG, METRICS, PROVENANCE, atomic_write_bytes, is_finished, read_json, read_jsonl
from fedpfn.study.cells import main_cells
from fedpfn.study.readings import Readings
from fedpfn.study.runner import TIMES
from fedpfn.study.spec import Spec

WINDOW = 10  # rounds in m(r), the mean the rule reads
WITHIN = 0.01  # m(r) within a point of m(last) counts as there
FIRST = 50  # the earliest R the rule considers; it steps by WINDOW
STILL_RISING = 50  # rounds back from the end over which a rise of more than WITHIN means "still rising"
MAIN_RUNS, GRID_RUNS = 80, 32  # the main study's runs of R rounds, and its grid's of R / 2 (pilot.md)


def keep(spec: Spec) -> None:
    """Each finished cell's accuracy curve, CPU seconds and provenance, in the page's stored file."""
    assert spec.page is not None
    times = read_jsonl(spec.runs / TIMES) if (spec.runs / TIMES).exists() else []
    cells: dict[str, Any] = {}
    for cell in main_cells(spec):
        if not is_finished(cell.folder):
            continue
        name = cell.folder.relative_to(spec.runs).as_posix()
        rows = [r for r in read_jsonl(cell.folder / METRICS) if "test_accuracy" in r]
        if [r["round"] for r in rows] != list(range(1, len(rows) + 1)):
            raise spec.refuse(f"{name}: the rule reads a test accuracy every round (--eval-every 1); nothing written")
        cells[dict(cell.point)["alpha"]] = {
            "cell": name, "accuracy": [r["test_accuracy"] for r in rows],
            "cpu_s": round(sum(t["cpu_s"] for t in times if t["cell"] == name), 1),
            "provenance": read_json(cell.folder / CONFIG).get(PROVENANCE)}  # fmt: skip
    if not cells:
        raise spec.refuse(f"no cell under {spec.runs} has finished: fedpfn study run {spec.path} first; nothing written")
    spec.page.stored.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(spec.page.stored, (json.dumps({"cells": cells}, indent=1) + "\n").encode())


def window_means(accuracy: list[float]) -> list[float]:
    """m(r) for r = WINDOW..len: the mean of rounds r - WINDOW + 1 to r (accuracy[0] is round 1)."""
    return [sum(accuracy[r - WINDOW : r]) / WINDOW for r in range(WINDOW, len(accuracy) + 1)]


def rounds_needed(accuracy: list[float]) -> dict[str, Any]:
    """The rule at one skew: m at the end, the first R in FIRST, FIRST + WINDOW, ... with m(R) within
    WITHIN of it, and whether the curve still rose by more than WITHIN over the last STILL_RISING rounds."""
    m = window_means(accuracy)
    last = len(accuracy)
    at = lambda r: m[r - WINDOW]  # noqa: E731
    first = next(r for r in range(FIRST, last + 1, WINDOW) if at(r) >= at(last) - WITHIN) if last >= FIRST else last
    rising = last > STILL_RISING and at(last) - at(last - STILL_RISING) > WITHIN
    return {"end": at(last), "R": first, "rising": rising, "last": last}


def decision(stored: dict[str, Any]) -> tuple[int, bool, float]:
    """The main study's R (the larger over skews; the last round where any curve still rises), whether
    that R is shown to be converged, and c, the mean CPU seconds a round over the cells."""
    read = {alpha: rounds_needed(c["accuracy"]) for alpha, c in stored["cells"].items()}
    rising = any(r["rising"] for r in read.values())
    big_r = max(r["last"] if r["rising"] else r["R"] for r in read.values())
    per_round = [c["cpu_s"] / len(c["accuracy"]) for c in stored["cells"].values()]
    return big_r, not rising, sum(per_round) / len(per_round)


def cost_hours(big_r: int, per_round: float) -> float:
    """The main study's CPU-hours at R rounds: its main runs, and its grid's at half the rounds."""
    return (MAIN_RUNS + GRID_RUNS / 2) * big_r * per_round / 3600


def section(spec: Spec) -> list[str]:
    """The rule applied at each skew, then R and the main study's cost, from the stored file alone."""
    stored = spec.stored_results()
    rows = []
    for alpha, cell in stored["cells"].items():
        r = rounds_needed(cell["accuracy"])
        m = window_means(cell["accuracy"])
        marks = "; ".join(f"{k}: {100 * m[k - WINDOW]:.2f}" for k in range(FIRST, r["last"] + 1, FIRST))
        device = (cell["provenance"] or {}).get("device", {})
        machine = f"{device['cpu']}, {device['cpus']} cores" if device else "not recorded"
        rows.append([alpha, r["last"], marks, r["R"], "yes" if r["rising"] else "no", f"{cell['cpu_s'] / r['last']:.2f}",
                     machine])  # fmt: skip
    big_r, converged, per_round = decision(stored)
    verdict = (f"**R = {big_r}** for the main study" + ("" if converged else
               ", the last round run: FedAvg was still rising there, so its endpoint is \"not shown to be converged\""))
    return ["## Results", "", f"Written by `fedpfn study page {spec.path} --trust-code` from the runs under {spec.runs}/ "
            f"(the page's stored file keeps their figures). m(r): FedAvg's mean test accuracy (%) over rounds r − {WINDOW - 1} "
            "to r, on Fashion-MNIST's 10,000 test images, seed 99; R: the first r from "
            f"{FIRST} in steps of {WINDOW} with m(r) within {100 * WITHIN:g} point of the last; still rising: m rose by more "
            f"than {100 * WITHIN:g} point over the last {STILL_RISING} rounds; CPU s a round: the cell's CPU seconds (the "
            "study runner's, the run's processes together) over its rounds.", "",
            *table(["α", "rounds run", "m(r) every 50 rounds", "R(α)", "still rising", "CPU s a round", "machine"], rows),
            "", f"{verdict}. At {per_round:.2f} CPU-seconds a round, the main study's {MAIN_RUNS} runs and its "
            f"grid's {GRID_RUNS} runs of half the rounds cost about **{cost_hours(big_r, per_round):.1f} CPU-hours** "
            "here."]  # fmt: skip


def in_short(spec: Spec) -> list[str]:
    """The pilot's answer in one paragraph, above the rule."""
    stored = spec.stored_results()
    big_r, converged, per_round = decision(stored)
    read = {a: rounds_needed(c["accuracy"]) for a, c in stored["cells"].items()}
    each = "; ".join(f"α = {a}: R = {r['R']}" + (f", still rising at {r['last']}" if r["rising"] else "") for a, r in read.items())
    return [f"**In short.** FedAvg's CNN {'reaches its plateau' if converged else 'is still rising'} within the rounds "
            f"run ({each}), so the main study runs **{big_r} rounds**. A round evaluated every round costs "
            f"{per_round:.2f} CPU-seconds here, which puts the main study at about "
            f"{cost_hours(big_r, per_round):.1f} CPU-hours."]  # fmt: skip


PILOT = Readings(keep=keep, sections={"pilot": section, "pilot-summary": in_short})  # studies/cnn_federation/pilot.toml's
