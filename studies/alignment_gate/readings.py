"""docs/alignment.md from the alignment gate's cells (studies/alignment_gate/alignment_gate.toml, its `page.readings`: READINGS below).

    fedpfn study page studies/alignment_gate/alignment_gate.toml --trust-code            # the finished cells, merged with the kept ones
    fedpfn study page --stored studies/alignment_gate/alignment_gate.toml --trust-code   # from docs/alignment/cells.json alone

The cells (`python -m fedpfn.experiments.lmc`, one regime and seed each: the study's arms are the
regimes) are kept, per seed and arm, as their figures in the study's stored file, so the page can
be written again without the runs. A regime's cells all come from one sweep: the runs found here
replace the kept ones of their regime once they cover as many seeds, never a mix of the two; the
page reads whatever regimes have cells (a regime not run says why: the study's `not_run`). The
reading is studies/alignment_gate/gate.py; the page's text is the study's template, with `{summary}`-style
fields (the gate's page predates the study format's marker lines).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from fedpfn.experiments.lmc_render import DIVERGED
from fedpfn.analysis.markup import code, inline
from fedpfn.core.files import atomic_write_bytes, read_json
from fedpfn.core.provenance import KEY, machines_sentence
from fedpfn.study.cells import main_cells
from fedpfn.study.figures import reading_figure
from fedpfn.study.limits import fields_problem
from fedpfn.study.page import template_text
from fedpfn.study.readings import Readings
from fedpfn.study.spec import Spec
from studies.alignment_gate import gate

RESULT = "lmc.json"
KEPT = ("loss_barrier", "loss_midpoint", "matched_loss_barrier", "permutation_loss", "moved_fraction",
        "fused_acc", "mean_individual_acc", "fusion_gap", "distance", "repair_loss_barrier", "train_loss_barrier",
        "ensemble_acc", "ensemble_gap")  # fmt: skip
MATCHED = ("permutation_loss", "moved_fraction", "matched_loss_barrier", "converged")
LINEAR_WITHIN = 0.05  # nats: the figure's axis is linear within it and logarithmic beyond (a seed at -19 beside 0.01s)


def figures_of(seed: Mapping[str, Any]) -> dict[str, Any]:
    """What a cell keeps of one seed's arm: KEPT where measured, and each matcher's MATCHED figures
    (a seed whose model diverged: which one, and no figure)."""
    if DIVERGED in seed:
        return {DIVERGED: seed[DIVERGED]}
    kept: dict[str, Any] = {key: seed[key] for key in KEPT if key in seed}
    if "matchers" in seed:
        kept["matchers"] = {m: {k: v[k] for k in MATCHED if k in v} for m, v in seed["matchers"].items()}
    return kept


def runs_here(spec: Spec) -> dict[str, Any]:
    """Every finished cell of the study, by regime, seed and arm, with the settings it ran with."""
    cells: dict[str, Any] = {}
    for cell in main_cells(spec):
        result = cell.folder / RESULT
        if not result.is_file():
            continue
        data = read_json(result)
        entry = cells.setdefault(cell.arm, {"config": data["config"], "seeds": {}})
        entry.setdefault(KEY, {})[cell.folder.name] = data.get(KEY)  # each cell's code and machine
        for arm, setting in data["settings"].items():
            for seed in setting["seeds"]:
                entry["seeds"].setdefault(str(seed["seed"]), {})[arm] = figures_of(seed)
        entry["config"]["seeds"] = sorted(int(s) for s in entry["seeds"])
    return cells


def in_order(spec: Spec, cells: Mapping[str, Any]) -> dict[str, Any]:
    """The regimes in the study's order, then any other kept one by name."""
    return {name: cells[name] for name in [*spec.arms, *sorted(cells)] if name in cells}


def stored_cells(spec: Spec) -> dict[str, Any]:
    """The kept cells (written with sorted keys), their regimes back in the study's order; none before the first page."""
    return in_order(spec, spec.stored_results()) if spec.page and spec.page.stored.is_file() else {}


def merged(stored: Mapping[str, Any], found: Mapping[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """The kept cells with each regime the runs here cover as fully replaced by them; what waits."""
    cells, waiting = dict(stored), []
    for name, regime in found.items():
        kept = len(stored.get(name, {}).get("seeds", {}))
        if len(regime["seeds"]) >= kept:
            cells[name] = regime
        else:
            waiting.append(f"{name}: {len(regime['seeds'])} cells run here wait to cover the {kept} kept seeds")
    return cells, waiting


def write_stored(spec: Spec) -> None:
    """The kept cells merged with the finished ones here, into the study's stored file; refused if there are none."""
    assert spec.page is not None
    cells, waiting = merged(stored_cells(spec), runs_here(spec))
    if not cells:
        raise spec.refuse(f"no finished cell under {spec.runs}; fedpfn study run {spec.path} first; nothing written")
    for line in waiting:
        print(line)
    spec.page.stored.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(spec.page.stored, (json.dumps(in_order(spec, cells), indent=1, sort_keys=True) + "\n").encode())


def machines(cells: Mapping[str, Any]) -> str:
    """Whether the cells came from one machine (cells kept before they recorded one: 'machine not recorded')."""
    found = [p for regime in cells.values() for p in (regime.get(KEY) or {"": None}).values()]
    return machines_sentence(found) or "Every cell ran on one machine with one set of libraries."


def figure_line(spec: Spec, cells: Mapping[str, Any]) -> str:
    """The gate's figure (P per regime, seed by seed), written beside the stored cells; its page line."""
    title = "P under full matching, per regime (seeds)"
    return reading_figure(spec, "P", gate.figure_panels(cells), title, "nats", "each panel's difference",
                          linear_within=LINEAR_WITHIN)  # fmt: skip


FIELDS = ("summary", "machines", "common", "regimes", "a_seeds", "b_seeds", "table_a", "table_b", "table_arms",
          "table_step", "figure")  # what the gate's template may name in braces  # fmt: skip


def write_page(spec: Spec, cells: Mapping[str, Any]) -> str:
    """The page's text: the study's template filled with the gate's readings of `cells`."""
    text = template_text(spec)
    if (problem := fields_problem(text, FIELDS)) is not None:  # a file: no attribute read, no memory filled
        raise spec.refuse(f"page.template {problem}")
    cells = {inline(name): regime for name, regime in cells.items()}  # a file's names, shown as typed (markup)
    regimes = {inline(name): flags for name, flags in spec.arms.items()}
    table_a, found, said = gate.question_a(cells)
    table_b, said_b = gate.question_b(cells, found)
    return text.format(
        summary="\n".join(gate.in_short(cells, found, said, said_b)), machines=machines(cells),
        common=code(" ".join(spec.shared)),
        regimes="\n".join(gate.regimes_table(cells, regimes, {inline(n): inline(why) for n, why in spec.not_run.items()})),
        a_seeds=gate.A_SEEDS, b_seeds=gate.B_SEEDS, table_a="\n".join(table_a), table_b="\n".join(table_b),
        table_arms="\n".join(gate.arms_table(cells)), table_step="\n".join(gate.step_control(cells)),
        figure=figure_line(spec, cells),
    )  # fmt: skip


def page_text(spec: Spec) -> str:
    """The whole page from the stored cells alone (what `fedpfn study page` writes after storing them)."""
    return write_page(spec, in_order(spec, spec.stored_results()))


READINGS = Readings(keep=write_stored, whole=page_text, partial=True)  # the cells finished so far
