"""`fedpfn study page`: the page from the finished cells, and again from its stored results alone.

From the cells, the study's numbers (each main cell's endpoints, the tuned values) are kept in
`page.stored` (JSON), then the page is written from that file; `--stored` writes it from the
file alone, so both routes give the same bytes. The page is the study's template (its `text`,
or the markdown file `template` names) with each marker line replaced by a table:

    <!-- study: arms -->            each arm's endpoints, mean ± std over seeds (n-1)
    <!-- study: tuning -->          each arm's tuning scores at each axes point, and the value chosen
    <!-- study: family NAME -->     the family's paired comparisons, Holm-adjusted together
    <!-- study: figure NAME ... --> those families' comparisons drawn, seed by seed (fedpfn.study.figures)
    <!-- study: arms-figure END --> each arm's endpoint END drawn, seed by seed, at each axes point
    <!-- study: against Y X -->      endpoint Y drawn against endpoint X, a line per axes point
    <!-- study: summary [NAME ...]-->  those families' (or every family's) differences in short, for the top;
                                    without families, each arm beside the baseline (plain_summary)
    <!-- study: commands -->        the commands that ran it and wrote the page

A study whose `page.readings` names readings of its own (fedpfn.study.readings: a module beside
the study file, imported only under `--trust-code`) keeps its own stored results and has sections
of its own (`<!-- study: KIND -->`), or writes the whole page itself (docs/guide/studies.md
shows one).
The statistics are fedpfn.analysis.stats's; the verdicts fedpfn.analysis.render's.
"""

from __future__ import annotations

import shlex
import statistics
from pathlib import Path
from typing import Any

from fedpfn.analysis.inference import ALPHA, POWER
from fedpfn.analysis.markup import code, inline, table
from fedpfn.analysis.paired_text import VERDICT_KEY, changed_section, p_number, p_text, verdict_cell, verdicts_printed
from fedpfn.analysis.plan import seeds_needed, seeds_text
from fedpfn.analysis.stats import Paired, adjust, mean_std, paired
from fedpfn.core.files import CONFIG, DamagedFile, METRICS, PROVENANCE, atomic_write_bytes, json_text, read_json, read_jsonl
from fedpfn.core.provenance import machines_sentence
from fedpfn.study import limits
from fedpfn.study.cells import Configure, choices, scores
from fedpfn.study.figures import against, arms_figure, families_figure
from fedpfn.study.places import MAX_TEMPLATE_BYTES, file_out_problem, read_place
from fedpfn.study.readings import Readings, readings_of
from fedpfn.study.runner import Planned, plan, refused
from fedpfn.study.spec import MARK, Endpoint, Spec

def endpoint_value(spec: Spec, folder: Path, name: str) -> float | None:
    """The endpoint in a finished run: the mean (or median) of its metric over the last rows that
    have it; a row's list (one value per client) counts as its mean."""
    end = spec.endpoints[name]
    found = [r[end.metric] for r in read_jsonl(folder / METRICS) if r.get(end.metric) is not None]
    if not found:
        if end.absent is not None:  # declared: a run may lack it (no privacy accountant, say)
            return None
        raise spec.refuse(f"{folder} has no {end.metric} in {METRICS}; endpoint '{name}' cannot be read")
    window = [sum(v) / len(v) if isinstance(v, list) else float(v) for v in found[-end.last :]]
    return float(statistics.median(window) if end.statistic == "median" else sum(window) / len(window))


def command_of(flags: tuple[str, ...]) -> str:
    return "fedpfn run " + shlex.join(flags)


def collect(spec: Spec, configure: Configure) -> dict[str, Any]:
    """The study's numbers from its finished main cells (StudyError if one is not finished)."""
    planned = [p for p in plan_done(spec, configure) if not p.cell.tuning]
    cells = [{"arm": p.cell.arm, "point": dict(p.cell.point), "seed": p.cell.seed, "folder": str(p.cell.folder),
              "command": command_of((*p.cell.flags, "--seed", str(p.cell.seed), "--out", str(p.cell.folder))),
              "endpoints": {name: endpoint_value(spec, p.cell.folder, name) for name in spec.endpoints},
              "provenance": read_json(p.cell.folder / CONFIG).get(PROVENANCE)}  # the code and machine it ran on
             for p in planned]  # fmt: skip
    chosen = choices(spec) if spec.tune else None
    found = scores(spec) if spec.tune else None
    return {
        "study": str(spec.path),
        "cells": cells,
        "chosen": None if chosen is None else [{"arm": arm, "point": dict(point), "value": value}
                                               for (arm, point), value in chosen.items()],  # fmt: skip
        **({} if found is None else {"scores": [{"arm": arm, "point": dict(point), "value": value, "score": score}
                                                for (arm, point, value), score in found.items()]}),  # fmt: skip
    }


def tuning_table(spec: Spec, stored: dict[str, Any]) -> list[str]:
    """Each arm's tuning runs at each axes point: each value's score (blank: collapsed, below the
    floor) and the value its main runs took; a borrowing arm's is its lender's."""
    tune = spec.tune
    if tune is None or not stored.get("scores"):
        raise spec.refuse("the template's marker 'tuning' needs [tune] and its finished tuning runs' stored scores")
    score = {(s["arm"], point_text(s["point"]), s["value"]): s["score"] for s in stored["scores"]}
    chosen = {(c["arm"], point_text(c["point"])): c["value"] for c in stored["chosen"]}
    rows = []
    for arm, point in chosen:
        lender = tune.borrow.get(arm)
        shown = ["" if score.get((lender or arm, point, v)) is None else f"{score[lender or arm, point, v]:.4f}"
                 for v in tune.values]  # fmt: skip
        said = f"{chosen[arm, point]} ({inline(spec.labels[lender])}'s)" if lender else chosen[arm, point]
        rows.append([inline(spec.labels[arm]), *([inline(point)] if spec.axes else []), *shown, said])
    head = [f"{tune.metric} at {tune.flag} {v}" for v in tune.values]
    return table(["arm", *(["axes"] if spec.axes else []), *head, "chosen"], rows)


def point_text(point: dict[str, str]) -> str:
    return ", ".join(f"{axis}={value}" for axis, value in point.items())


def by_point(stored: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """The stored cells grouped by their axes point (its text; '' without axes), in their order."""
    found: dict[str, list[dict[str, Any]]] = {}
    for cell in stored["cells"]:
        found.setdefault(point_text(cell["point"]), []).append(cell)
    return found


def arms_table(spec: Spec, stored: dict[str, Any]) -> list[str]:
    """Each arm at each axes point: its seeds, and each endpoint's mean ± std over them."""
    names = list(spec.endpoints)
    head = [inline(f"{n} ({spec.endpoints[n].unit or 'as measured'})") for n in names]
    rows = []
    for point, cells in by_point(stored).items():
        for arm in spec.arms:
            ours = [c for c in cells if c["arm"] == arm]
            shown = [endpoint_text(spec.endpoints[name], [c["endpoints"][name] for c in ours]) for name in names]
            rows.append([inline(spec.labels[arm]), *([inline(point)] if spec.axes else []), len(ours), *shown])
    return table(["arm", *(["axes"] if spec.axes else []), "seeds", *head], rows)


def endpoint_text(end: Endpoint, values: list[float | None]) -> str:
    """Mean ± std (n-1) of the cells that have the endpoint, in its format; its `absent` text if none has it."""
    found = [end.scale * v for v in values if v is not None]
    if not found:
        return inline(end.absent or "n/a")
    mean, std = mean_std(found)
    return format(mean, end.format) + ("" if std is None else f" ± {format(std, end.format)}")


def family_rows(spec: Spec, stored: dict[str, Any], name: str) -> list[Paired]:
    """The family's comparisons (each arm − its baseline on the same seed, at every axes point), Holm-adjusted.
    An endpoint a run may lack (`absent`: a diverged run has no alignment figure) pairs the seeds where
    both arms have it; the table's seed count says how many."""
    family = spec.families[name]
    rows = []
    for point, cells in by_point(stored).items():
        values = {arm: {c["seed"]: c["endpoints"][family.endpoint] for c in cells
                        if c["arm"] == arm and c["endpoints"][family.endpoint] is not None} for arm in spec.arms}  # fmt: skip
        for arm, baseline in family.pairs:
            label = f"{point + ': ' if point else ''}{spec.labels[arm]} − {spec.labels[baseline]}"
            both = {seed: v for seed, v in values[arm].items() if seed in values[baseline]}
            rows.append(paired(label, family.endpoint, both, values[baseline]))
    adjust(rows)
    return rows


def family_table(spec: Spec, stored: dict[str, Any], name: str) -> list[str]:
    end = spec.endpoints[spec.families[name].endpoint]
    unit = inline(end.unit or "as measured")
    lines = table(["comparison", f"mean difference ({unit})", "95 % CI", "p", "p (Holm)", "seeds higher", "verdict"])
    for c in family_rows(spec, stored, name):
        ci = "n/a" if c.low is None or c.high is None else f"[{end.scale * c.low:+.3f}, {end.scale * c.high:+.3f}]"
        p, holm = p_text(c, ".4f"), p_number(c.p_holm, ".4f")
        lines.append(f"| {inline(c.label)} | {end.scale * c.mean:+.3f} | {ci} | {p} | {holm} | {c.wins} of {len(c.seeds)} "
                     f"| {verdict_cell(c, end.scale, unit)} |")  # fmt: skip
    lines += ["", VERDICT_KEY]
    margin = spec.families[name].margin
    if margin is not None:
        lines += ["", *(f"- {inline(c.label)}: {margin_text(c, margin, end.scale, unit)}." for c in family_rows(spec, stored, name))]
    return lines


def summary(spec: Spec, stored: dict[str, Any], names: list[str]) -> list[str]:
    """The page's answer in short, for its top: the named families' comparisons (every family's
    where none is named), a line each, with the difference, its 95 % interval and the verdict; the
    tables below give the detail."""
    lines = []
    for name in names or list(spec.families):
        family = spec.families[name]
        end = spec.endpoints[family.endpoint]
        unit = inline(end.unit or "as measured")
        lines.append(f"- {inline(family.heading)}")
        for c in family_rows(spec, stored, name):
            ci = "" if c.low is None or c.high is None else f" [{end.scale * c.low:+.2f}, {end.scale * c.high:+.2f}]"
            said = verdict_cell(c, end.scale, unit).split(";")[0]
            lines.append(f"    - {inline(c.label)}: {end.scale * c.mean:+.2f} {unit}{ci}: {said}")
    return lines


def plain_summary(spec: Spec, stored: dict[str, Any]) -> list[str]:
    """A study without comparisons in short: each arm's endpoints as the arms table gives them, at
    each axes point, each beside the baseline's with the difference (arm − baseline) where both have
    it, then what the seeds allow: no interval without a declared comparison, and the seeds one would
    need only where the seeds run give the differences a spread."""
    lines = []
    fewest = min((sum(c["arm"] == arm for c in cells) for cells in by_point(stored).values() for arm in spec.arms),
                 default=0)  # fmt: skip
    for point, cells in by_point(stored).items():
        lines += [f"- {inline(point)}"] if point else []
        base = [c for c in cells if c["arm"] == spec.baseline]
        for arm in (a for a in spec.arms if a != spec.baseline):
            ours = [c for c in cells if c["arm"] == arm]
            said = ", ".join(beside_baseline(spec, name, ours, base) for name in spec.endpoints)
            lines.append(f"{'    ' if point else ''}- {inline(spec.labels[arm])}: {said}")
    if fewest < 2:
        return [*lines, "", f"{'One seed' if fewest == 1 else f'{fewest} seeds'} an arm: each difference is one run's, "
                "with no interval, and one seed gives no spread from which to say how many seeds a comparison would "
                "need."]  # fmt: skip
    return [*lines, "", "The study declares no comparison (`[families]`): no difference above is tested or has an "
            f"interval; beside each, its spread over the seeds run and the seeds that a paired t test at {ALPHA:g} would "
            f"need to resolve a difference that size with {100 * POWER:g} % power."]  # fmt: skip


def beside_baseline(spec: Spec, name: str, ours: list[dict[str, Any]], base: list[dict[str, Any]]) -> str:
    """One endpoint of an arm as the arms table writes it, then the baseline's and the mean difference
    over the seeds both have it (with its spread and seeds needed from two seeds on)."""
    end = spec.endpoints[name]
    values = [c["endpoints"][name] for c in ours]
    unit = " " + inline(end.unit) if end.unit and any(v is not None for v in values) else ""
    said = f"{inline(name)} {endpoint_text(end, values)}{unit}"
    theirs = {c["seed"]: c["endpoints"][name] for c in base if c["endpoints"][name] is not None}
    diffs = [end.scale * (c["endpoints"][name] - theirs[c["seed"]]) for c in ours
             if c["endpoints"][name] is not None and c["seed"] in theirs]  # fmt: skip
    if not diffs:
        return said
    mean, std = mean_std(diffs)
    spread = "" if std is None else (f", std {format(std, end.format)} over {len(diffs)} seeds: "
                                     f"{seeds_text(seeds_needed(std, abs(mean)))} seeds to resolve it")  # fmt: skip
    shown = endpoint_text(end, [c["endpoints"][name] for c in base])
    return f"{said} ({inline(spec.labels[spec.baseline])} {shown}: {format(mean, '+' + end.format)}{spread})"


def inside_margin(c: Paired, margin: float, scale: float) -> bool:
    """Whether the 95 % interval lies inside ±margin (in the page's unit): a difference smaller than it."""
    return c.low is not None and c.high is not None and -margin < scale * c.low and scale * c.high < margin


def margin_text(c: Paired, margin: float, scale: float, unit: str) -> str:
    """Whether the 95 % interval lies inside ±margin (declared before the runs, in the page's unit):
    then the difference is smaller than the margin; else a difference that large is not ruled out."""
    if c.low is None or c.high is None:
        return f"no interval, so the margin of ±{margin:g} {unit} is not read"
    if inside_margin(c, margin, scale):
        return f"smaller than the margin of ±{margin:g} {unit} declared before the runs: the 95 % CI lies inside it"
    return (f"a difference of ±{margin:g} {unit} or more, the margin declared before the runs, is not ruled out: "
            "the 95 % CI reaches it")  # fmt: skip


def commands(spec: Spec, stored: dict[str, Any]) -> list[str]:
    """How the page was made: the study's commands, then each arm's first cell (at each axes point)
    as `fedpfn run`."""
    first: dict[tuple[str, str], dict[str, Any]] = {}
    for cell in stored["cells"]:
        first.setdefault((point_text(cell["point"]), cell["arm"]), cell)
    where = " at each axes point" if spec.axes else ""
    return [f"Run with {code(f'fedpfn study run {spec.path}')}, written with {code(f'fedpfn study page {spec.path}')} "
            f"(`--stored`: again from {inline(spec.page.stored if spec.page else '')} alone). Each arm's first cell{where}:",
            "", *(f"- {inline(spec.labels[arm])}{', ' + inline(point) if point else ''}: {code(cell['command'])}"
                  for (point, arm), cell in first.items()),  # fmt: skip
            *machines_lines([cell.get(PROVENANCE) for cell in stored["cells"]])]


def machines_lines(provenances: list[Any]) -> list[str]:
    """A blank line and the sentence that says the cells ran on more than one machine (or were kept
    before cells recorded theirs); nothing when they all ran on one."""
    said = machines_sentence(provenances)
    return ["", inline(said)] if said else []


def section(spec: Spec, stored: dict[str, Any] | None, marker: str, readings: Readings | None = None) -> list[str]:
    """The lines a marker stands for (a study's own readings' sections first); an unknown marker is refused."""
    kind, _, name = marker.partition(" ")
    reading = readings.sections if readings is not None else {}
    if kind in reading:
        return reading[kind](spec)
    if stored is None:
        raise spec.refuse(f"the template's marker '{marker}' needs the stored results, which this reading does not keep")
    if kind == "arms":
        return arms_table(spec, stored)
    if kind == "tuning":
        return tuning_table(spec, stored)
    if kind == "commands":
        return commands(spec, stored)
    if kind == "summary" and not name and not spec.families:
        return plain_summary(spec, stored)
    if kind == "summary" and set(name.split()) <= set(spec.families):
        return summary(spec, stored, name.split())
    if kind == "family" and name in spec.families:
        return family_table(spec, stored, name)
    if kind == "figure" and name and set(name.split()) <= set(spec.families):
        return families_figure(spec, name.split(), {n: family_rows(spec, stored, n) for n in name.split()})
    if kind == "arms-figure" and name in spec.endpoints:
        return arms_figure(spec, name, by_point(stored))
    if kind == "against" and len(name.split()) == 2 and set(name.split()) <= set(spec.endpoints):
        return against(spec, *name.split(), by_point(stored))
    known = ["arms", "tuning", "commands", "summary [FAMILY ...]", *(f"{kind} {f}" for kind in ("family", "figure") for f in spec.families),
             *(f"arms-figure {e}" for e in spec.endpoints), "against Y X (two endpoints)", *reading]  # fmt: skip
    raise spec.refuse(f"unknown marker '{MARK}{marker} -->' in the page's template (known: {', '.join(known)})")


def render(spec: Spec, stored: dict[str, Any] | None, readings: Readings | None = None) -> str:
    """The page, closed by the list of its verdicts that the decision rule of 2026-12-07 changed."""
    with verdicts_printed() as seen:
        text = body(spec, stored, readings)
    return text + (changed_section(seen) if spec.page and spec.page.changed_verdicts else "")


def template_text(spec: Spec) -> str:
    """The page's prose with its markers: the TOML's `text`, or the markdown file it names."""
    assert spec.page is not None
    if spec.page.text is not None:
        return spec.page.text
    try:
        return read_place(spec.page.template, "page.template", MAX_TEMPLATE_BYTES)  # type: ignore[arg-type]
    except FileNotFoundError:
        raise spec.refuse(f"page.template: '{spec.page.template}' does not exist") from None
    except (DamagedFile, OSError) as err:
        raise spec.refuse(str(err)) from None

def body(spec: Spec, stored: dict[str, Any] | None, readings: Readings | None = None) -> str:
    """The template with each marker line replaced by its section (or the readings' whole page)."""
    if readings is not None and readings.whole is not None:
        return readings.whole(spec)
    out = []
    for line in template_text(spec).splitlines(keepends=True):
        text = line.strip()
        if text.startswith(MARK) and text.endswith("-->"):
            out += [f"{row}\n" for row in section(spec, stored, text.removeprefix(MARK).removesuffix("-->").strip(), readings)]
        else:
            out.append(line)
    return "".join(out)


def write(spec: Spec, configure: Configure, from_stored: bool = False) -> Path:
    """The page (and, from the cells, the stored results first); nothing written on a refusal."""
    if spec.page is None:
        raise spec.refuse("has no [page]; declare page.out, page.stored and page.template or page.text")
    readings = readings_of(spec)
    if readings is None and spec.command != "run":
        raise spec.refuse(f"the page's tables read `fedpfn run` folders; a study of command = {spec.command!r} "
                          "needs readings of its own (page.readings, fedpfn.study.readings)")  # fmt: skip
    for path, key in ((spec.page.out, "page.out"), (spec.page.stored, "page.stored")):  # before anything is read
        if (problem := file_out_problem(path, key, "a study's page")) is not None:
            raise spec.refuse(problem)
    if not from_stored:
        keep(spec, configure, readings)
    stored = None if readings is not None else stored_results(spec)
    try:
        text = render(spec, stored, readings)
    except (KeyError, TypeError, AttributeError, IndexError) as err:  # a reading's own stored file, edited
        if not from_stored:
            raise
        raise spec.refuse(f"page.stored: {spec.page.stored} does not hold what the page reads ({type(err).__name__}: "
                          f"{limits.shown(err.args[0] if err.args else '')})") from None  # fmt: skip
    spec.page.out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(spec.page.out, text.encode())
    return spec.page.out


def keep(spec: Spec, configure: Configure, readings: Readings | None) -> None:
    """The stored results from the finished cells: the readings' own (those that read a part's cells
    while others are still to run: once no cell is refused), or the generic tables'."""
    assert spec.page is not None
    if readings is not None and readings.partial:
        for study in spec.every():  # a part's cells too
            if (problem := refused(plan(study, configure))) is not None:
                raise problem
        readings.keep(spec)
    elif readings is not None:
        plan_done(spec, configure)
        readings.keep(spec)
    else:
        data = collect(spec, configure)
        spec.page.stored.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(spec.page.stored, (json_text(data, indent=1) + "\n").encode())


def stored_results(spec: Spec) -> dict[str, Any]:
    """The stored results the page's own tables read, checked in shape (fedpfn.study.limits)."""
    data = spec.stored_results()
    if (problem := limits.stored_problem(spec, data)) is not None:
        raise spec.refuse(f"page.stored: {spec.page.stored if spec.page else ''} {problem}")
    return data


def plan_done(spec: Spec, configure: Configure) -> list[Planned]:
    """Every cell, each finished, or a StudyError naming the first that is not."""
    planned = plan(spec, configure)
    missing = [p for p in planned if p.state != "done"]
    if missing:
        raise spec.refuse(f"{len(missing)} cells are not finished (first: {missing[0].cell.folder}, "
                          f"{missing[0].state}); fedpfn study run {spec.path} first; nothing written")  # fmt: skip
    return planned
