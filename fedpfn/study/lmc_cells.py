"""A study's cells run by `python -m fedpfn.experiments.lmc`: a cell is a folder holding lmc.json.

A cell is finished when its lmc.json holds the settings its flags give, read off the command's
own parser and checks (a cell written before the anchors' scope settings counts as their
defaults: fedpfn.core.anchors.scope_filled); a cell whose lmc.json holds other settings is
refused in one line, never reused or overwritten; a killed cell left no lmc.json and is run
again (its figure, if it left one, replaced). A running cell holds its folder's lock, the one a
run folder takes (fedpfn.runtime.runfolder), so `status` tells running from missing. Each cell
runs one torch thread unless the study says otherwise: the study runs cells side by side itself.
The machinery is every result cell's (fedpfn.study.result_cells).
"""

from __future__ import annotations

from typing import Any

from fedpfn.core.anchors import scope_filled
from fedpfn.core.settings import ConfigError
from fedpfn.experiments import lmc
from fedpfn.experiments.lmc_render import OUTPUT_FILES
from fedpfn.study.result_cells import ResultCell, ResultCells, parsed

RESULT = "lmc.json"
PROG = "python -m fedpfn.experiments.lmc"
LmcCell = ResultCell  # a cell's checked settings (an LmcConfig) and the command line that gives them


class LmcCells(ResultCells):
    """`python -m fedpfn.experiments.lmc`, one seed a cell (or, in a joint study, the arm's seeds
    together), run in this process."""

    name, log = "lmc", "lmc.log"
    result, prog, outputs = RESULT, PROG, OUTPUT_FILES
    main = staticmethod(lmc.main)

    def checked(self, argv: list[str]) -> lmc.LmcConfig:
        args = parsed(lmc.build_parser(PROG), argv)
        cfg, found = lmc.read_config(args)
        found += lmc.unused_problems(cfg, set(args))
        found += lmc.relation_problems(cfg) if not found else []
        if found:
            raise ConfigError("\n".join(found))
        return cfg

    def saved(self, config: dict[str, Any]) -> dict[str, Any]:
        return scope_filled(config, lmc.LmcConfig)  # a cell from before the scope settings: their defaults
