"""docs/alignment.md from the alignment gate's cells: every number and verdict on it is computed here.

    python scripts/alignment_page.py            # gather runs/alignment/*/seed*/lmc.json, then write the page
    python scripts/alignment_page.py --stored   # write the page from docs/alignment/cells.json alone

The cells (scripts/alignment_sweep.py, over fedpfn/study/gate_grid.py's regimes) are kept, per
seed and arm, as their figures in docs/alignment/cells.json, so the page can be written again
without the runs. A regime's cells all come from one sweep: the runs found here replace the kept
ones of their regime once they cover as many seeds, never a mix of the two. The reading is fedpfn/study/gate.py; the page's text is
studies/alignment.md.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping
from typing import Any

from fedpfn.core.files import atomic_write_bytes
from fedpfn.core.provenance import CHECKOUT as ROOT
from fedpfn.core.provenance import KEY, machines_sentence
from fedpfn.analysis.lmc_render import DIVERGED
from fedpfn.study import gate
from fedpfn.study.gate_grid import COMMON, NOT_RUN, OUT, REGIMES

CELLS = ROOT / "docs" / "alignment" / "cells.json"
PAGE = ROOT / "docs" / "alignment.md"
TEMPLATE = ROOT / "studies" / "alignment.md"
KEPT = ("loss_barrier", "loss_midpoint", "matched_loss_barrier", "permutation_loss", "moved_fraction",
        "fused_acc", "mean_individual_acc", "fusion_gap", "distance", "repair_loss_barrier", "train_loss_barrier",
        "ensemble_acc", "ensemble_gap")  # fmt: skip
MATCHED = ("permutation_loss", "moved_fraction", "matched_loss_barrier", "converged")


def figures_of(seed: Mapping[str, Any]) -> dict[str, Any]:
    """What a cell keeps of one seed's arm: KEPT where measured, and each matcher's MATCHED figures
    (a seed whose model diverged: which one, and no figure)."""
    if DIVERGED in seed:
        return {DIVERGED: seed[DIVERGED]}
    kept: dict[str, Any] = {key: seed[key] for key in KEPT if key in seed}
    if "matchers" in seed:
        kept["matchers"] = {m: {k: v[k] for k in MATCHED if k in v} for m, v in seed["matchers"].items()}
    return kept


def runs_here() -> dict[str, Any]:
    """Every finished cell under runs/alignment, by regime, seed and arm, with the settings it ran with."""
    cells: dict[str, Any] = {}
    for regime in REGIMES:
        for result in sorted((OUT / regime).glob("seed*/lmc.json")):
            data = json.loads(result.read_text())
            entry = cells.setdefault(regime, {"config": data["config"], "seeds": {}})
            entry.setdefault(KEY, {})[result.parent.name] = data.get(KEY)  # each cell's code and machine
            for arm, setting in data["settings"].items():
                for seed in setting["seeds"]:
                    entry["seeds"].setdefault(str(seed["seed"]), {})[arm] = figures_of(seed)
            entry["config"]["seeds"] = sorted(int(s) for s in entry["seeds"])
    return cells


def stored_cells() -> dict[str, Any]:
    """docs/alignment/cells.json (kept with sorted keys), its regimes back in the sweep's order."""
    stored = json.loads(CELLS.read_text()) if CELLS.is_file() else {}
    return {name: stored[name] for name in [*REGIMES, *sorted(stored)] if name in stored}


def merged(stored: Mapping[str, Any], found: Mapping[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """The kept cells with each regime the runs here cover as fully replaced by them; what waits."""
    cells, waiting = dict(stored), []
    for name, regime in found.items():
        kept = len(stored.get(name, {}).get("seeds", {}))
        if len(regime["seeds"]) >= kept:
            cells[name] = regime
        else:
            waiting.append(f"{name}: {len(regime['seeds'])} cells run here wait to cover the {kept} kept seeds")
    return {name: cells[name] for name in [*REGIMES, *sorted(cells)] if name in cells}, waiting


def machines(cells: Mapping[str, Any]) -> str:
    """Whether the cells came from one machine (cells kept before they recorded one: 'machine not recorded')."""
    found = [p for regime in cells.values() for p in (regime.get(KEY) or {"": None}).values()]
    return machines_sentence(found) or "Every cell ran on one machine with one set of libraries."


def write_page(cells: Mapping[str, Any]) -> str:
    """The page's text: studies/alignment.md filled with the gate's readings of `cells`."""
    table_a, found, said = gate.question_a(cells)
    table_b, said_b = gate.question_b(cells, found)
    return TEMPLATE.read_text().format(
        summary="\n".join(f"- {line}" for line in [*said, *said_b]), machines=machines(cells),
        common=" ".join(COMMON), regimes="\n".join(gate.regimes_table(cells, REGIMES, NOT_RUN)), a_seeds=gate.A_SEEDS,
        b_seeds=gate.B_SEEDS, table_a="\n".join(table_a), table_b="\n".join(table_b),
        table_arms="\n".join(gate.arms_table(cells)),
    )  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--stored", action="store_true", help="write the page from docs/alignment/cells.json alone")
    args = parser.parse_args(argv)
    cells = stored_cells()
    if not args.stored:
        cells, waiting = merged(cells, runs_here())
        if not cells:
            print(f"error: no finished cell under {OUT}; run scripts/alignment_sweep.py first", file=sys.stderr)
            return 2
        for line in waiting:
            print(line)
        CELLS.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(CELLS, (json.dumps(cells, indent=1, sort_keys=True) + "\n").encode())
    atomic_write_bytes(PAGE, write_page(cells).encode())
    print(f"wrote {PAGE.relative_to(ROOT)} from {sum(len(c['seeds']) for c in cells.values())} cells")
    return 0
