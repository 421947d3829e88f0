"""docs/fusion.md from the soup study and the ColD fusion study (their `page.readings`, SOUP and
COLD below): for each, the question, the setting, the arms with the control, the results with
intervals and the commands, all from the studies' stored results (fedpfn.experiments.soup_report,
fedpfn.experiments.cold_report).

    fedpfn study page studies/fusion/soup.toml --trust-code           # the soup cells' seeds into docs/fusion/soup.json
    fedpfn study page studies/fusion/cold.toml --trust-code           # the ColD runs evaluated into docs/fusion/cold.json
    fedpfn study page --stored studies/fusion/cold.toml --trust-code  # the page again from those two files alone

Either study writes the whole page: its own stored results, and the other's kept beside them (in
page.stored's folder as soup.json or cold.json). The page's text is the study's template, with
`{soup[...]}` and `{cold[...]}` fields.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict
from functools import partial
from pathlib import Path
from typing import Any

from fedpfn.analysis.inference import retested
from fedpfn.analysis.markup import image
from fedpfn.analysis.paired_text import verdict
from fedpfn.experiments import cold, cold_report, soup_report
from fedpfn.experiments.command import build_parser, read_settings
from fedpfn.experiments.pretrain import PretrainConfig
from fedpfn.experiments.soup_run import SPANS, compare_arms
from fedpfn.core.files import atomic_write_bytes, read_json
from fedpfn.core.settings import ConfigError
from fedpfn.core.provenance import KEY, machine_of, machines_sentence
from fedpfn.study.cells import main_cells
from fedpfn.study.figures import written
from fedpfn.study.page import template_text
from fedpfn.study.readings import Readings
from fedpfn.study.result_cells import parsed
from fedpfn.study.soup_cells import SoupCells
from fedpfn.study.spec import Spec

STUDIES = {"soup": "studies/fusion/soup.toml", "cold": "studies/fusion/cold.toml"}  # which study a result kept before it came from


def _flags(record: Mapping[str, Any], defaults: Mapping[str, Any]) -> str:
    """The flags that set `record`'s values where they differ from the defaults."""
    text = lambda v: ",".join(map(str, v)) if isinstance(v, list | tuple) else str(v)  # noqa: E731
    return " ".join(
        f"--{k.replace('_', '-')} {text(v)}" for k, v in record.items() if text(v) != text(defaults[k])
    )


def start_command(result: Mapping[str, Any]) -> str:
    """The command that made the result's start, from its recorded pretraining settings (or why not)."""
    start = Path(result["config"]["start"])
    if not result.get("start_record"):
        return f"# {start}: its pretraining settings were not recorded beside these results"
    return f"python -m fedpfn.experiments.pretrain {_flags(result['start_record'], asdict(PretrainConfig()))} --out {start.parent}"


def study_commands(kind: str, result: Mapping[str, Any]) -> list[str]:
    """The commands behind a stored result: its start's, then its study's run and page."""
    study = result.get("study", STUDIES[kind])
    return [start_command(result), f"fedpfn study run {study}", f"fedpfn study page {study} --trust-code"]


def figure_of(spec: Spec, kind: str, result: Mapping[str, Any]) -> str:
    """The part's figure (its report's, from the stored result) as docs/fusion/KIND.png, whichever
    study writes the page; the page's line."""
    figure = {"soup": soup_report.soup_figure, "cold": cold_report.cold_figure}[kind](result)
    title = " ".join(figure.get_suptitle().split())  # on one line: the figure wraps it
    return image(title, written(spec, kind, figure, file=f"{kind}.png"))


def soup_fields(result: Mapping[str, Any]) -> dict[str, Any]:
    """The soup part's fields, from a soup study's stored result."""
    cfg = result["config"]
    results = soup_report.markdown(result).split("\n", 1)[1].lstrip()  # the run's title gives way to the page's
    return {"seeds": len(result["arms"]["plain"]), "ingredients": cfg["ingredients"], "model": cfg["model"],
            "samples": cfg["train_subset"] or "all the downstream", "results": results,
            "machine": machine_of(result.get(KEY)), "commands": "\n".join(study_commands("soup", result))}  # fmt: skip


def cold_fields(result: Mapping[str, Any]) -> dict[str, Any]:
    """The ColD part's fields, from a ColD study's stored result."""
    cfg = result["config"]
    results = cold_report.markdown(result).split("\n", 1)[1].lstrip()
    return {"seeds": len(result["arms"]["plain"]), "rounds": cfg["rounds"], "model": cfg["model"], "results": results,
            "machine": machine_of(result.get(KEY)), "commands": "\n".join(study_commands("cold", result))}  # fmt: skip


KEY_COMPARISONS = ("shared − plain", "shared − independent")  # the question's: anchors' whole effect, and sharing's
KEY_METRICS = {"soup": {"uniform_acc": "uniform soup", "greedy_acc": "greedy soup"},
               "cold": {m: cold_report.HEADERS[m].removesuffix(" (%)") for m in cold_report.METRICS}}  # fmt: skip


def in_short(found: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """The page's answer in short, for its top: each part's key comparisons (shared anchors against plain,
    and against the control), a line each with the difference, 95 % interval and verdict after Holm
    within its metric, as the comparison tables below test them."""
    spans = {"soup": SPANS, "cold": dict.fromkeys(cold_report.METRICS, 1.0)}
    lines = ["**In short.** Do fine-tunes (model soups) and contributors (ColD fusion) that share one anchor mask "
             "fuse better than plain ones, and is a gain from sharing the anchors rather than from freezing as much? "
             "The key comparisons, paired by seed: the difference in points, its 95 % interval and the verdict "
             "(Holm within each metric; the sections below give the detail):", ""]  # fmt: skip
    for kind, title in (("soup", "Model soups"), ("cold", "ColD fusion")):
        for c in retested(found[kind]["comparisons"], spans[kind]):
            if c.label in KEY_COMPARISONS and c.metric in KEY_METRICS[kind]:
                ci = "" if c.low is None or c.high is None else f" [{100 * c.low:+.2f}, {100 * c.high:+.2f}]"
                lines.append(f"- {title}, {c.label}, {KEY_METRICS[kind][c.metric]}: {100 * c.mean:+.2f} points{ci}: "
                             f"{verdict(c).split(';')[0]}")  # fmt: skip
    return lines


def stored_of(spec: Spec, own: str) -> dict[str, Any]:
    """Both studies' kept results: this study's (`own`, page.stored) and the other's beside it."""
    assert spec.page is not None
    found = {own: spec.stored_results()}
    for kind in STUDIES:
        beside = spec.page.stored.parent / f"{kind}.json"
        if kind not in found:
            if not beside.is_file():
                raise spec.refuse(f"{beside} is missing: the fusion page needs the {kind} study's results beside "
                                  f"{spec.page.stored} (fedpfn study page {STUDIES[kind]} --trust-code); nothing written")  # fmt: skip
            found[kind] = read_json(beside)
    return found


def page_text(spec: Spec, own: str) -> str:
    """The whole page from the two kept results (what `fedpfn study page` writes after storing its own)."""
    found = stored_of(spec, own)
    provenances = [*found["soup"].get("provenances", [found["soup"].get(KEY)]), found["cold"].get(KEY)]
    mixed = machines_sentence([p for p in provenances if p])  # unrecorded: said per section
    text = template_text(spec).removesuffix("\n")  # ends in {mixed}: the page ends where its last section does
    figures = {kind: figure_of(spec, kind, found[kind]) for kind in STUDIES}
    return text.format(soup=soup_fields(found["soup"]), cold=cold_fields(found["cold"]), figure=figures,
                       mixed=f"\n{mixed}\n" if mixed else "", short="\n".join(in_short(found)))  # fmt: skip


def keep(spec: Spec, result: Mapping[str, Any]) -> None:
    assert spec.page is not None
    spec.page.stored.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(spec.page.stored, (json.dumps(result, indent=1) + "\n").encode())


def joined_soups(results: list[dict[str, Any]]) -> dict[str, Any]:
    """One seed a cell's soup.json, joined into the result one command over every seed writes: the
    arms' seeds in order, the paired comparisons over them, the seconds summed."""
    first = results[0]
    per_arm = {arm: [seed for r in results for seed in r["arms"][arm]] for arm in first["arms"]}
    config = {**first["config"], "seeds": [s for r in results for s in r["config"]["seeds"]]}
    provenances = [r.get(KEY) for r in results]
    same = len({machine_of(p) for p in provenances}) == 1
    kept = {k: v for k, v in first.items() if k not in ("argv", "out")}  # a cell's command and folder: the study's
    return {**kept, "config": config, "arms": per_arm, "comparisons": compare_arms(per_arm),
            "notes": list(dict.fromkeys(n for r in results for n in r.get("notes", []))),
            "seconds": sum(r["seconds"] for r in results), KEY: first.get(KEY) if same else None,
            "provenances": provenances}  # fmt: skip


def write_soup(spec: Spec) -> None:
    """The soup cells (all finished) joined into the study's stored result."""
    results = [read_json(cell.folder / SoupCells.result) for cell in main_cells(spec)]
    keep(spec, {**joined_soups(results), "study": str(spec.path)})


def write_cold(spec: Spec) -> None:
    """ColD's evaluation of the study's finished runs (fedpfn.experiments.cold) into its stored result;
    the evaluation's settings are `page.evaluate` (`fedpfn cold`'s flags)."""
    assert spec.page is not None
    if spec.cell != cold.CELL or set(spec.arms) != set(cold.FUSED):
        raise spec.refuse(f"page.readings: the ColD readings read runs laid out as cell = '{cold.CELL}' with the arms "
                          f"{', '.join(cold.FUSED)}")  # fmt: skip
    if "--runs" in (flag.split("=")[0] for flag in spec.page.evaluate):
        raise spec.refuse("page.evaluate: --runs is the study's to set (runs = ...); leave it out")
    try:
        given = parsed(build_parser("page.evaluate", cold.__doc__, cold.ColdEval, ""), [*spec.page.evaluate, "--out", "."])
    except ConfigError as err:
        raise spec.refuse(f"page.evaluate: {err}") from None
    settings, found = read_settings(cold.ColdEval, {**given, "runs": str(spec.runs), "seeds": ",".join(map(str, spec.seeds))})
    cfg, more = (None, []) if found else cold.read_settings(spec.runs, settings)
    if found or more or cfg is None:
        raise spec.refuse(f"page.evaluate: {'; '.join(found + more)}; nothing written")
    keep(spec, {**cold.evaluation(spec.runs, cfg), "study": str(spec.path)})


SOUP = Readings(keep=write_soup, whole=partial(page_text, own="soup"))  # studies/fusion/soup.toml's
COLD = Readings(keep=write_cold, whole=partial(page_text, own="cold"))  # studies/fusion/cold.toml's
