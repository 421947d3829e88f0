"""A study's cells run by `python -m fedpfn.experiments.soup`: a cell is one seed's folder holding
soup.json, finished, refused, resumed and held as every result cell (fedpfn.study.result_cells).
A study's own readings (fedpfn.study.readings) may join the cells' seeds into one result, as one
command over those seeds would have written it.
"""

from __future__ import annotations

from fedpfn.core.settings import ConfigError
from fedpfn.experiments import soup
from fedpfn.experiments.command import build_parser, read_settings
from fedpfn.study.result_cells import ResultCells, parsed


class SoupCells(ResultCells):
    """`python -m fedpfn.experiments.soup`, one seed a cell, run in this process."""

    name, log = "soup", "soup.log"
    result, prog, outputs = "soup.json", "python -m fedpfn.experiments.soup", soup.OUTPUT_FILES
    main = staticmethod(soup.main)

    def checked(self, argv: list[str]) -> soup.SoupConfig:
        parser = build_parser(self.prog, soup.__doc__, soup.SoupConfig, ", ".join(soup.OUTPUT_FILES))
        args = parsed(parser, argv)
        cfg, found = read_settings(soup.SoupConfig, args)
        found += soup.relation_problems(cfg, set(args)) if not found else []
        if found:
            raise ConfigError("\n".join(found))
        return cfg
