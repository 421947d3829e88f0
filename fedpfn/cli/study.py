"""`fedpfn study VERB FILE`: a study declared in one TOML file, run, resumed and written up.

    fedpfn study status study.toml            # every cell: done, running, stopped, missing; time left
    fedpfn study run study.toml --jobs 2      # every cell to its end (reused, resumed, started)
    fedpfn study page study.toml              # the page from the finished cells, and its stored JSON
    fedpfn study page --stored study.toml     # the page again from the stored JSON alone

The study is fedpfn.study's; this module gives it `fedpfn run`'s own path from flags to a
checked config (parse_args, checked_config), so an arm's flag is refused as `fedpfn run`
refuses it, before any cell starts. docs/guide/studies.md has a worked example.

A study file is a file: the code it names (a rule, a server, a model by dotted path, its page's
own readings) is not the command's. `status` never imports a user's code a study file names;
`run` imports its cells' code, and `page` its cells' and its readings module
(fedpfn.study.readings), only where the user typed `--trust-code`
(fedpfn.core.user_code.name_file_code); fedpfn's and Flower's own classes
(`flwr.serverapp.strategy:Krum`) need no flag.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from fedpfn.core.flags import OneLineParser, fail
from fedpfn.core.settings import ConfigError
from fedpfn.core.user_code import TRUST_FLAG, flags_of_a_file, name_file_code

if TYPE_CHECKING:
    from fedpfn.core.config import RunConfig
    from fedpfn.study.spec import Spec

VERBS = {
    "status": "every cell: done, running, stopped or missing, and the time left (estimated from finished cells)",
    "run": "every cell to its end: a finished cell of the same settings reused, a stopped one resumed",
    "page": "the page from the finished cells (and the stored results JSON); --stored: from that JSON alone",
}


def configure(flags: list[str]) -> RunConfig:
    """A cell's flags as `fedpfn run` reads and checks them (ConfigError: one line per problem); the
    code they name is the study file's, imported only as `trust_code` allowed."""
    from fedpfn.cli.simulate import checked_config, parse_args  # what a run needs: not before the file is read

    with flags_of_a_file():
        return checked_config(parse_args(flags, "fedpfn run"))


TRUSTING = ("run", "page")  # the verbs that import a study file's own code where the user typed TRUST_FLAG


def trust_code(spec: Spec, verb: str, trusted: bool, stored: bool = False) -> None:
    """Name the code the study file names that this verb may import (its cells' unless `stored`,
    and a page's readings), or refuse in one line saying which flag lets it (only the TRUSTING
    verbs, and only where the user typed TRUST_FLAG)."""
    from fedpfn.study.cells import named_code

    found = {} if stored else named_code(spec)
    if verb == "page" and spec.page is not None and spec.page.readings is not None:
        found.setdefault(spec.page.readings, f"study: {spec.path}: page.readings")
    if verb in TRUSTING:
        again = " --stored" * stored
        refusal = f"give {TRUST_FLAG} (fedpfn study {verb}{again} {spec.path} {TRUST_FLAG}) if you trust the file's code"
    else:
        refusal = (f"fedpfn study {verb} never imports a study file's own code; only fedpfn study run {spec.path} "
                   f"{TRUST_FLAG} runs it")  # fmt: skip
    name_file_code(found, trusted and verb in TRUSTING, refusal)


def build_parser(prog: str) -> argparse.ArgumentParser:
    parser = OneLineParser(prog=prog, description="A study declared in one TOML file (docs/guide/studies.md): "
                           "FILE's arms x seeds, one run folder a cell.")  # fmt: skip
    sub = parser.add_subparsers(dest="verb", required=True, metavar="VERB", parser_class=OneLineParser,
                                title="verbs (fedpfn study VERB --help)")  # fmt: skip
    for name, about in VERBS.items():
        one = sub.add_parser(name, help=about, description=about)
        one.add_argument("file", metavar="FILE", help="the study's TOML file")
        if name == "run":
            one.add_argument("--jobs", type=int, default=1, help="cells run at a time, each in its own process "
                             "(default 1; at most one a core)")  # fmt: skip
            one.add_argument("--arm", action="append", default=[], metavar="ARM", help="only this arm's cells "
                             "(repeatable; default every arm): runs over other arms may go on beside it")  # fmt: skip
            one.add_argument("--cell", help=argparse.SUPPRESS)  # one cell by its folder: what --jobs starts
        if name == "page":
            one.add_argument("--stored", action="store_true", help="from the stored results JSON alone, not the runs")
        if name in TRUSTING:
            one.add_argument(TRUST_FLAG, action="store_true", help="import the code (a rule, server, model or "
                             "dataset by dotted path, a page's readings) that the study file names; without it such "
                             "a study is refused")  # fmt: skip
    return parser


def main(argv: list[str] | None = None, prog: str = "fedpfn study") -> int:
    args = build_parser(prog).parse_args(argv)
    from fedpfn.study.spec import load

    try:
        spec = load(args.file)  # a file that is no study is refused before what a run needs is imported
        from fedpfn.study import runner

        trust_code(spec, args.verb, getattr(args, "trust_code", False), getattr(args, "stored", False))
        if args.verb == "status":
            print("\n".join(runner.status(spec, configure)))
            return 0
        if args.verb == "run":
            if args.jobs < 1:
                raise ConfigError(f"--jobs {args.jobs}: give a whole number of cells at a time, 1 or more")
            if args.cell is not None:
                return runner.run_one_cell(spec, configure, args.cell)
            return runner.run(spec, configure, args.jobs, args.arm, (TRUST_FLAG,) * args.trust_code)
        from fedpfn.study import page  # its statistics and figures: only a page needs them

        print(f"wrote {page.write(spec, configure, from_stored=args.stored)}")
        return 0
    except ConfigError as err:
        return fail("; ".join(str(err).splitlines()))
