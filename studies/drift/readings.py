"""The drift study's page (its `page.readings`, READINGS below): what it reads from the finished cells, and
its results again from what it stored (docs/study/drift-<model>-*) alone.

From the cells: a `fedpfn.analysis.report` per skew and family (its JSON, tables and figures
in `<prefix>-a<alpha>-<family>/`) and what the page reads besides them, kept in the study's
stored file (`page.stored`, `<prefix>-page.json`). From the stored files alone: the reports'
tables rendered again from their JSON, the same sentences (studies.drift.text), and the
figure of the primary family and the fusion gap (what is stored of them: no dot where no seed was kept).
The page is always written from the stored files, so both routes give the same bytes.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
from pathlib import Path
from typing import Any

import numpy as np

from fedpfn.analysis.markup import code, inline
from fedpfn.analysis.plots import PairedSeries
from fedpfn.analysis.render import rewrite_tables, series_of
from fedpfn.analysis.report import main as report_main
from fedpfn.analysis.stats import Paired, adjust, paired
from fedpfn.core.files import METRICS, read_json, read_jsonl
from fedpfn.core.settings import ConfigError
from fedpfn.study.cells import groups, main_cells, points, scores
from fedpfn.study.figures import reading_figure
from fedpfn.study.places import place_problem
from fedpfn.study.readings import Readings
from fedpfn.study.spec import Spec
from studies.drift.text import (ACC_BARRIER, ALIGNMENT, Design, Row, alignment_rows, figure_of, primary_family, results,
                                summary)

SIGNED_MARK = "align_measured_on"  # written with every measurement by the signed barrier, never by the clamped one


def design(spec: Spec) -> Design:
    """The study file's parts the page reads; the families are its reports."""
    if spec.tune is None or "alpha" not in spec.axes:  # a study file naming this reading without its parts
        raise spec.refuse("page.readings: the drift readings read a tuned setting ([tune]) and an axis alpha; declare both")
    model = next((tokens[1] for name, tokens in groups(spec.shared) if name == "model" and len(tokens) > 1), "mlp")
    reports = {name: ([f.baseline, *f.arms], f.heading) for name, f in spec.families.items()}  # Markdown, as the template
    study = str(spec.path)
    lead = (f"made by {code(f'fedpfn study run {study}')} and written by {code(f'fedpfn study page {study} --trust-code')}; "
            f"{code(f'fedpfn study page --stored {study} --trust-code')} writes it again from {inline(prefix(spec))}-*, the "
            "reports' JSON and what the page read from")  # fmt: skip
    names = {arm: inline(label) for arm, label in spec.labels.items()}  # a file's labels, shown as typed
    return Design(tuple(spec.axes["alpha"]), tuple(spec.arms), spec.tune.values, reports, names, model, lead)


def prefix(spec: Spec) -> str:
    """`docs/study/drift-mlp` of `docs/study/drift-mlp-page.json`: where the reports live beside it."""
    assert spec.page is not None
    return str(spec.page.stored.parent / spec.page.stored.name.removesuffix("-page.json"))


def report_folder(spec: Spec, alpha: str, name: str) -> Path:
    """A family's report beside the stored results (whose place was checked when the study was read);
    an alpha or family name that leads elsewhere is refused."""
    stored = Path(prefix(spec))
    leaf = f"{stored.name}-a{alpha}-{name}"
    if (problem := place_problem(leaf, f"the report of family {name!r} at alpha {alpha!r}")) is not None:
        raise spec.refuse(problem)
    return stored.parent / leaf


def folders(spec: Spec) -> dict[tuple[str, str, int], Path]:
    """(alpha, arm, seed) -> the main cell's folder."""
    return {(dict(c.point)["alpha"], c.arm, c.seed): c.folder for c in main_cells(spec)}


def report(spec: Spec, d: Design, alpha: str, name: str) -> None:
    """`python -m fedpfn.analysis.report` over one family's main runs at `alpha`, in this process."""
    out, runs = report_folder(spec, alpha, name), folders(spec)
    arms = [str(runs[alpha, arm, spec.seeds[0]].parent) for arm in d.reports[name][0]]
    last = spec.endpoints[spec.families[name].endpoint].last
    with contextlib.redirect_stdout(io.StringIO()):
        code = report_main([*arms, "--last-k", str(last), "--out", str(out)])
    if code:
        raise spec.refuse(f"the report of {out} failed (exit {code})")


def values(run: Path, key: str) -> list[Any]:
    """`key` in every metrics row of `run` that has it (alignment: every 10th round)."""
    return [r[key] for r in read_jsonl(run / METRICS) if r.get(key) is not None]


def alignment_means(spec: Spec, alpha: str, arm: str, key: str) -> dict[int, float]:
    """Seed -> the run's mean of `key` over its alignment measurements."""
    out = {}
    for seed in spec.seeds:
        run = folders(spec)[alpha, arm, seed]
        measured = values(run, key)
        if not measured:
            raise spec.refuse(f"{run} has no {key} measurement; was it run with --alignment-every?")
        out[seed] = float(np.mean(measured))
    return out


def alignment_family(spec: Spec, d: Design) -> list[Paired]:
    """FedPFN − FedAvg and FedPFN − control of each alignment figure at each skew, Holm-adjusted together."""
    family = []
    for alpha in d.alphas:
        for key in ALIGNMENT:
            ours = alignment_means(spec, alpha, "fedpfn", key)
            for base, name in (("fedavg", "FedAvg"), ("fedpfn-client", "control (client masks)")):
                label = f"α={alpha} {key.removeprefix('align_')}: FedPFN − {name}"
                family.append(paired(label, "alignment", ours, alignment_means(spec, alpha, base, key)))
    adjust(family)
    return family


def same_curves(spec: Spec, d: Design) -> list[tuple[str, str]]:
    """Arm pairs whose test accuracy is equal in every round of every seed at every skew."""
    runs = folders(spec)
    curves = {arm: [values(runs[alpha, arm, s], "test_accuracy") for alpha in d.alphas for s in spec.seeds]
              for arm in d.arms}  # fmt: skip
    return [(a, b) for i, a in enumerate(d.arms) for b in d.arms[i + 1 :] if curves[a] == curves[b]]


def clamped(spec: Spec) -> bool:
    """Whether the runs' barriers came from the clamped instrument: no measurement says where it was taken."""
    rows = [row for run in folders(spec).values() for row in read_jsonl(run / METRICS) if ALIGNMENT[0] in row]
    return bool(rows) and not any(SIGNED_MARK in row for row in rows)


def grid(spec: Spec, d: Design) -> tuple[dict, dict]:
    """alpha -> arm -> lr -> score, and alpha -> arm -> the chosen lr (the first of the best)."""
    found = scores(spec)
    if found is None:
        raise spec.refuse("the tuning runs are not all finished; run the study first")
    table = {point[0][1]: {arm: {lr: found[arm, point, lr] for lr in d.lrs} for arm in d.arms} for point in points(spec)}
    chosen = {a: {arm: max(d.lrs, key=lambda lr: table[a][arm][lr] or 0.0) for arm in d.arms} for a in table}
    return table, chosen


def collect(spec: Spec, d: Design) -> dict[str, Any]:
    """What the page reads from the runs besides the reports, as plain data (accuracy as a fraction)."""
    runs = list(folders(spec).values())
    measured = {key: [v for run in runs for v in values(run, key)] for key in (*ALIGNMENT, ACC_BARRIER)}
    acc = measured[ACC_BARRIER]
    table, chosen = grid(spec, d)
    return {
        "source": f"the main and grid runs under {spec.runs}, read by fedpfn study page {spec.path}",
        "alignment": [dataclasses.asdict(p) for p in alignment_family(spec, d)],
        "always_zero": {key: len(v) for key, v in measured.items() if v and all(x == 0 for x in v)},
        "clamped": clamped(spec),
        "acc_barrier": {"count": len(acc), "mean": float(np.mean(acc)), "max": float(max(acc))} if acc else None,
        "same_curves": same_curves(spec, d),
        "grid": table,
        "chosen": chosen,
    }


def write_stored(spec: Spec) -> None:
    """From the finished cells: every report, and the page's data in the stored file."""
    d = design(spec)
    data = collect(spec, d)
    for alpha in d.alphas:
        for name in d.reports:
            report(spec, d, alpha, name)
    assert spec.page is not None
    spec.page.stored.parent.mkdir(parents=True, exist_ok=True)
    spec.page.stored.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n")


def stored_report(spec: Spec, out: Path) -> dict[str, Any]:
    """A report's JSON, its tables rendered again from it (the verdicts as this checkout words them)."""
    try:
        markdown = rewrite_tables(out)
        return {**read_json(out / "report.json"), "markdown": markdown}
    except (OSError, ConfigError) as err:
        raise spec.refuse(f"{out}: {err}") from None


GAP = "align_fusion_gap"  # the alignment figure drawn beside accuracy (in points; the loss barrier is in nats)


def figure_panels(primary: list[Row], alignment: list[Row], last: int) -> dict[str, list[PairedSeries]]:
    """The primary family (accuracy over the `last` rounds) and the fusion gap's comparisons in points,
    as the tables read them (one kept without its per-seed differences: its mean and interval alone)."""
    gap = [row for row in alignment if figure_of(row.name) == GAP]
    named = lambda row: row.name.replace(" fusion_gap:", ":").replace(" (client masks)", "")  # noqa: E731  (the primary's names)
    kept = "" if all(row.test.diffs for row in gap) else " (seeds not kept:\nthe stored mean and CI)"
    return {f"primary: accuracy, last {last} rounds": [series_of(row.test, 100.0)._replace(label=row.name) for row in primary],
            f"fusion gap{kept}": [series_of(row.test, 100.0)._replace(label=named(row)) for row in gap]}  # fmt: skip


def figure(spec: Spec, primary: list[Row], alignment: list[Row]) -> list[str]:
    """The primary family's and the fusion gap's figure, written beside the stored file; what it draws, said."""
    title = f"{spec.title} FedPFN against FedAvg and the control, seed by seed"
    last = spec.endpoints[spec.families["all"].endpoint].last
    line = reading_figure(spec, "accuracy-gap", figure_panels(primary, alignment, last), title, "points", "arm − baseline")
    lost = any(figure_of(row.name) == GAP and not row.test.diffs for row in alignment)
    said = (" The fusion gap's per-seed differences were not kept (the page it was adopted from printed its means and "
            "intervals only), so its panel draws the stored mean and 95 % interval alone, with no dot." if lost else "")
    return [line, "", f"Each dot is one seed's difference in points, as stored: the mean test accuracy (the server's "
            f"Fashion-MNIST test set) over the run's last {last} rounds, and the fusion gap averaged over the run's alignment "
            "measurements; the diamond is the mean over seeds and the bar its 95 % interval (Student's t), as in the "
            f"tables, whose verdicts say what is resolved.{said} The loss barrier, in nats, is in the table alone.", ""]  # fmt: skip


def stored_reports(spec: Spec, d: Design) -> dict[str, dict[str, dict]]:
    """Each skew's stored reports, by report name."""
    return {alpha: {name: stored_report(spec, report_folder(spec, alpha, name)) for name in d.reports} for alpha in d.alphas}


def section(spec: Spec) -> list[str]:
    """The page's results from the stored files alone."""
    d = design(spec)
    data, reports = spec.stored_results(), stored_reports(spec, d)
    return results(d, data, reports, figure(spec, primary_family(d, reports), alignment_rows(data)))[:-1]


def in_short(spec: Spec) -> list[str]:
    """The page's answer in short, for its top (`<!-- study: drift-summary -->`)."""
    d = design(spec)
    return summary(primary_family(d, stored_reports(spec, d)))


READINGS = Readings(keep=write_stored, sections={"drift": section, "drift-summary": in_short})  # studies/drift/*.toml's
