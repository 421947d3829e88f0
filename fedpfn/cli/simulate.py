"""The simulation command: one run, a comparison, or the rest of a stopped run, on this machine.

    fedpfn run --algorithm fedpfn --dataset fmnist --model cnn --rounds 20 --out runs/pfn
    fedpfn run --algorithm fedpfn rounds=20 alpha=0.1      # KEY=VALUE, as `flwr run` takes them
    python run_sim.py ...                                 # the same command, as the design names it

Every setting of `fedpfn.core.config.RunConfig` and of every algorithm is a flag (`--anchor-ratio`,
`--prox-mu`, `--client-gpus`, ...) and a KEY=VALUE override; `--config FILE.toml` supplies the
same settings from a file and flags override it. A flag the run would not use is refused, never
ignored, and a misspelt one is answered with the flag meant. Bad settings are reported one per
line with exit code 2, before any engine starts and before the run folder is touched.
"""

from __future__ import annotations

import argparse
import dataclasses
import re
import shlex
import sys
from pathlib import Path
from typing import Any, NoReturn

from fedpfn.runtime import env

env.flower_defaults()  # before Flower is imported: its telemetry reads the switch once, at import

from fedpfn.core.config import ConfigError, RunConfig, RunFlags  # noqa: E402
from fedpfn.core.flags import fail, suggestion  # noqa: E402
from fedpfn.core.hyper import dotted, one_value_each  # noqa: E402
from fedpfn.core.settings import add_flags, read_toml  # noqa: E402
from fedpfn.core.user_code import UserInterrupt, code_settings, keep_out_of_imports, name_code  # noqa: E402
from fedpfn.runtime.algorithms import parse_config, validated  # noqa: E402

PROG = "python run_sim.py"  # how the command is spelt in its messages; `fedpfn run` passes its own
# --help in groups, in this order; a setting's group comes from its declared kind
GROUPS = {
    "run": "what runs, and where it writes",
    "data": "data and federation (every arm of a comparison shares these)",
    "client rule": "local training and the client rules' hyperparameters",
    "anchors": "FedPFN and FedPNU (--algorithm fedpfn, fedpnu, or fedpfn+RULE)",
    "server": "server algorithm and aggregation",
    "privacy": "a wrapper around the server side, a mod around each client (Flower's differential privacy)",
    "attacks": "a seeded fraction of malicious clients (what robust aggregation defends against)",
    "resources": "where the clients train (a resume may move a run)",
    "tracking": "where the numbers are logged besides the run folder (a resume may switch these)",
}
KIND_GROUPS = {"": "client rule", "federation": "data", "placement": "resources", "tracking": "tracking",
               "bookkeeping": "run"}  # fmt: skip
# the few settings whose kind does not say where a reader looks for them
GROUP_OF = {
    "seed": "run",
    "data_root": "data",
    "download": "data",
    "min_replies": "server",
    "round_timeout": "server",
}
KEY_VALUE = re.compile(r"([A-Za-z][A-Za-z0-9_-]*)=(.*)", re.DOTALL)


class Parser(argparse.ArgumentParser):
    """argparse whose mistakes are one line (a ConfigError), never its usage dump."""

    def error(self, message: str) -> NoReturn:
        missing = re.fullmatch(r"argument (\S+?)(?:/\S+)?: expected one argument", message)
        switch = re.fullmatch(r"argument --(\S+?)/\S+: ignored explicit argument '(.*)'", message, re.DOTALL)
        if missing:
            message = f"{missing[1]} needs a value"
        elif switch:
            message = (
                f"--{switch[1]} takes no value: write --{switch[1]} or --no-{switch[1]} (or {switch[1]}=true)"
            )
        raise ConfigError(f"{message} ({help_hint(self.prog)})")


def help_hint(prog: str) -> str:
    return f"{prog} --help-all lists every flag"


FIRST = ("algorithm", "server", "dataset", "model", "num_clients", "clients_per_round", "alpha", "rounds",
         "local_epochs", "lr", "seed", "out")  # fmt: skip  (what --help shows: the settings most runs change first)


class FirstSettingsHelp(argparse.Action):
    """`--help`: the usage, the command's one line, and the FIRST settings; `--help-all` has the rest."""

    def __init__(self, option_strings: list[str], dest: str = argparse.SUPPRESS, default: Any = None,
                 help: str | None = None) -> None:  # fmt: skip
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, help=help)

    def __call__(self, parser: argparse.ArgumentParser, *_: Any) -> None:
        formatter = parser._get_formatter()
        formatter.add_usage(parser.usage, parser._actions, parser._mutually_exclusive_groups)
        formatter.add_text(parser.description)
        by_dest = {a.dest: a for a in parser._actions if a.option_strings}
        every = [a for a in by_dest.values() if not isinstance(a, (FirstSettingsHelp, argparse._HelpAction))]
        formatter.start_section(f"the {len(FIRST)} common settings of {len(every)}; "
                                f"{parser.prog} --help-all shows every one, grouped")  # fmt: skip
        formatter.add_arguments([by_dest[name] for name in FIRST])
        formatter.end_section()
        parser._print_message(formatter.format_help(), sys.stdout)
        parser.exit(0)


def group_of(field: dataclasses.Field) -> str:
    return GROUP_OF.get(field.name) or KIND_GROUPS[field.metadata.get("kind", "")]


def hparam_groups() -> dict[str, list[type]]:
    """The algorithms' hyperparameter classes by the --help group they belong to."""
    from fedpfn.runtime.algorithms import ANCHOR_METHODS, CLIENT_RULES
    from strategies import SERVER_RULES
    from strategies.registry import USER_RULE
    from clients.attacks import AttackParams
    from strategies.wrapping import PluginParams

    return {
        "client rule": list(dict.fromkeys(a.Params for a in CLIENT_RULES.values())),
        "anchors": list(dict.fromkeys(a.Params for a in ANCHOR_METHODS.values())),
        "server": list(dict.fromkeys(rule.Params for rule in (*SERVER_RULES.values(), USER_RULE))),
        "privacy": [PluginParams],
        "attacks": [AttackParams],
    }


def build_parser(prog: str = PROG) -> argparse.ArgumentParser:
    from fedpfn.runtime.algorithms import algorithm_names
    from strategies import SERVER_RULES

    parser = Parser(prog=prog, usage=f"{prog} [--config FILE] [--FLAG VALUE ...] [KEY=VALUE ...]",
                    description=__doc__.split("\n\n")[0], argument_default=argparse.SUPPRESS,
                    allow_abbrev=False, add_help=False)  # fmt: skip
    parser.add_argument("-h", "--help", action=FirstSettingsHelp, help="the common settings (those most runs change)")
    parser.add_argument("--help-all", action="help", help="every setting, grouped")
    groups = {name: parser.add_argument_group(name, about) for name, about in GROUPS.items()}
    run = groups["run"]
    run.add_argument("--config", metavar="FILE", help="TOML file with settings (flags override it)")
    run.add_argument("--resume", metavar="DIR", help="continue the run in DIR from its last checkpoint "
                     "(with --rounds N: to N rounds); it keeps its settings")  # fmt: skip
    run.add_argument("--compare", metavar="ALGOS", help="comma-separated algorithms, each run on every seed "
                     "of --seeds with the same partitions, into --out (default runs/compare)")  # fmt: skip
    run.add_argument("--seeds", metavar="SEEDS", help="comma-separated seeds of --compare (default: 0; "
                     "3 or more for intervals that mean something)")  # fmt: skip
    run.add_argument("--algorithm", help=f"client algorithm: {', '.join(algorithm_names())}, "
                     "or fedpfn+RULE / fedpnu+RULE (default: fedavg)")  # fmt: skip
    groups["server"].add_argument(
        "--server",
        help=f"server algorithm: {', '.join(SERVER_RULES)}, or package.module:Class (default: fedavg)",
    )
    flagged = {f.name: group_of(f) for f in dataclasses.fields(RunFlags) if f.metadata.get("flag", True)}
    for name, group in groups.items():
        mine = {key for key, where in flagged.items() if where == name} - {"algorithm", "server"}
        add_flags(
            group, RunFlags, skip=[f.name for f in dataclasses.fields(RunFlags) if f.name not in mine]
        )
    flagged_already: set[str] = set()  # one flag a name: it sets each part of the run that declares it
    for name, classes in hparam_groups().items():
        for cls in classes:
            add_flags(groups[name], cls, skip=flagged_already)
            flagged_already |= {f.name for f in dataclasses.fields(cls)}
    parser.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help=argparse.SUPPRESS)
    return parser


def flag_names(parser: argparse.ArgumentParser) -> dict[str, str]:
    """Every value-taking dest of `parser` by the name a KEY=VALUE spells it with (dashes)."""
    return {
        a.dest.replace("_", "-"): a.dest for a in parser._actions if a.option_strings and a.dest != "help"
    }


def read_overrides(tokens: list[str], names: dict[str, str], prog: str = PROG) -> tuple[dict[str, str], list[str]]:
    """KEY=VALUE tokens as {dest: text} (quotes around VALUE dropped), and one line per bad token."""
    values, problems = {}, []
    for token in tokens:
        match = KEY_VALUE.fullmatch(token)
        if not match:
            problems.append(f"'{token}' is neither a flag nor KEY=VALUE (e.g. rounds=5; {help_hint(prog)})")
            continue
        key, value = match[1].replace("_", "-"), match[2]
        if key not in names:
            problems.append(f"unknown setting '{match[1]}' in {token}{suggestion(match[1], names)}")
            continue
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        values[names[key]] = value
    return values, problems


def load_user_rule(argv: list[str]) -> None:
    """A client rule named by dotted path (`--algorithm mypkg.rules:MyRule`) imported before the
    flags are built, so that its hyperparameters are flags too (ConfigError where it does not load).
    The command line names it, so fedpfn.core.user_code may import it."""
    from fedpfn.runtime.algorithms import split_algorithm

    for k, token in enumerate(argv[:-1]):
        if token == "--resume":  # the folder resumed is data, whatever files it holds: no code from it
            keep_out_of_imports(Path(argv[k + 1]))
    for k, token in enumerate(argv):
        named = argv[k + 1] if token in ("--algorithm", "--compare") and k + 1 < len(argv) else None
        for prefix in ("--algorithm=", "algorithm=", "--compare="):
            named = token[len(prefix) :] if token.startswith(prefix) else named
        for algorithm in (named or "").split(",") if token.startswith("--compare") else [named or ""]:
            if ":" in algorithm:
                name_code(algorithm.strip("'\""))
                split_algorithm(algorithm.strip("'\""))


def name_given_code(args: dict[str, Any]) -> None:
    """The dotted paths this command line gives (server, its wrapper, the client mod, the algorithms
    compared): its own, not a file's."""
    name_code(*code_settings(args), *str(args.get("compare", "")).split(","))


def parse_args(argv: list[str] | None, prog: str = PROG) -> dict[str, Any]:
    """Flags and KEY=VALUE overrides as one dict of the given settings (argparse's SUPPRESS: no defaults)."""
    load_user_rule(sys.argv[1:] if argv is None else argv)
    parser = build_parser(prog)
    known, unknown = parser.parse_known_intermixed_args(argv)
    flags = [token for token in unknown if token.startswith("-")]
    if flags:  # what follows an unknown flag is its value: report the flags alone
        raise ConfigError("\n".join(
            f"unknown flag {flag}{suggestion(flag.split('=')[0], parser._option_string_actions)} ({help_hint(prog)})"
            for flag in flags
        ))  # fmt: skip
    args = vars(known)
    overrides, problems = read_overrides(args.pop("overrides", []) + unknown, flag_names(parser), prog)
    problems += [f"{key.replace('_', '-')} is given twice (a flag and {key.replace('_', '-')}=...)"
                 for key in overrides if key in args]  # fmt: skip
    if problems:
        raise ConfigError("\n".join(problems))
    name_given_code({**args, **overrides})
    return {**args, **overrides}


def unused_flags(args: dict[str, Any]) -> list[str]:
    """One line per given flag that this kind of run would not use: refused, never ignored."""
    unused = []
    if "seeds" in args and "compare" not in args:
        unused.append("seeds: --seeds is for --compare ALGOS (every algorithm on every seed); "
                      "one run takes --seed N")  # fmt: skip
    if "compare" in args:
        unused += [f"{key}: {why}" for key, why in {
            "algorithm": "--compare names the algorithms it runs; --algorithm is not used with it",
            "seed": "--compare runs every seed of --seeds; --seed is not used with it",
            "resume": "a comparison resumes its unfinished runs itself: run the same --compare command again",
            "overwrite": "a comparison reuses or resumes the runs in --out of the same settings; "
                         "give another --out to start over",
        }.items() if key in args]  # fmt: skip
    if "resume" in args:
        unused += [f"resume: --{key} cannot be combined with --resume ({why})" for key, why in {
            "config": "the run keeps its settings",
            "out": "the run continues in the folder --resume names",
            "overwrite": "a resumed run keeps its files",
        }.items() if key in args]  # fmt: skip
    return unused


def settings_from_args(args: dict[str, Any]) -> dict[str, Any]:
    """The settings the user gave: the TOML file's, then the flags (which override it)."""
    values: dict[str, Any] = {}
    if "config" in args:
        path = args.pop("config")
        values.update(yielded(read_toml(path), args, f"config '{path}'"))
        one_value_each(values, f"config '{path}'")
    values.update(args)
    return values


def yielded(preset: dict[str, Any], flags: dict[str, Any], where: str) -> dict[str, Any]:
    """The preset less what a choice on the command line leaves unused: `--engine ray` over a
    preset's `engine-mode`, `--partition iid` over its `alpha`. The flags choose, and the preset's
    settings of the choice they replaced go with it, each said in a note (never silently)."""
    from fedpfn.core.config import GROUPS, core_fields
    from fedpfn.core.settings import parse_leniently

    named = given_names(flags)
    merged = {setting_name(key): value for key, value in {**preset, **flags}.items()}
    typed, _ = parse_leniently(core_fields(), merged)  # what does not parse, the run's own check refuses
    dropped: set[str] = set()
    for group in GROUPS:
        if named & set(group.choosers):
            dropped |= {name for name in group.build(typed)[2] if name not in named}
    kept = {key: value for key, value in preset.items() if setting_name(key) not in dropped}
    for key in preset.keys() - kept.keys():
        print(f"note: {where}: {key} = {preset[key]!r} left out: the command line's choice does not use it", file=sys.stderr)
    return kept


def config_from_args(args: dict[str, Any]) -> RunConfig:
    """Defaults, then the TOML file, then the flags."""
    values = settings_from_args(args)
    return parse_config(values, given_names(values))


def checked_config(args: dict[str, Any]) -> RunConfig:
    """A new run's config from its parsed command line, checked (every problem at once): what
    `fedpfn run` runs, and what a script that runs many takes from the same flags."""
    values = settings_from_args(args)
    given = given_names(values)
    return validated(parse_config(values, given), given)


def given_names(values: dict[str, Any]) -> set[str]:
    """The settings named in `values`, a preset's tables by their keys (`[fedprox] prox_mu` is
    fedprox.prox_mu): one given that the run would not use is refused, at its default too."""
    return {setting_name(key) for key in dotted(values)}


def setting_name(key: object) -> str:
    """A key as the settings spell it (`engine-mode` and `engine_mode` alike)."""
    return str(key).replace("-", "_")


def main(argv: list[str] | None = None, prog: str = PROG) -> int:
    """The command; `prog` is how its messages spell it (python run_sim.py, or fedpfn run)."""
    try:
        args = parse_args(argv, prog)
        unused = unused_flags(args)
        if unused:
            raise ConfigError("\n".join(unused))
        if "compare" in args:
            return compare_main(args, argv, prog)
        resume_dir = args.pop("resume", None)
        cfg = None if resume_dir is not None else checked_config(args)  # refused before the runtime loads
    except (ConfigError, UserInterrupt) as err:  # a rule's module may interrupt its own import
        return fail(str(err), err.exit_code)
    return run(args, cfg, resume_dir)


def run(args: dict[str, Any], cfg: RunConfig | None, resume_dir: str | None) -> int:
    """A new run of `cfg`, or the rest of the stopped run in `resume_dir` (`args`: what may change),
    to its end; a fault mid-run is one line and the way to resume."""
    from fedpfn.runtime.runfolder import RunWriteError
    from fedpfn.runtime.server import WorkerLost
    from fedpfn.runtime.simulation import resume_config, simulate

    try:
        if cfg is None:
            cfg = resume_config(resume_dir, args)
        simulate(cfg, resume=resume_dir is not None)  # prints a header, the rounds and a summary
    except RunWriteError as err:  # the run folder could not be written mid-run: a fault, not bad input
        return fail(str(err), code=1)  # its message names the file and the resume command
    except (ConfigError, UserInterrupt) as err:
        return fail(str(err), err.exit_code)
    except WorkerLost as err:
        return stopped(str(err), cfg.run_dir)
    return 0


def stopped(reason: str, run_dir: Path) -> int:
    """A run that stopped on a fault: why, where, and how to continue (its folder is resumable)."""
    from fedpfn.runtime.runfolder import RunFolder

    print(f"error: {reason}", file=sys.stderr)
    print(RunFolder(run_dir).stop_message(), file=sys.stderr)
    return 1


def compare_main(args: dict[str, Any], argv: list[str] | None, prog: str = PROG) -> int:
    """`--compare A,B --seeds 0,1,2`: every algorithm on every seed, then tables and figures."""
    try:
        from fedpfn.runtime.compare import check_algorithms, parse_list

        algorithms = check_algorithms(parse_list(args.pop("compare"), "compare"))
        seeds = parse_list(args.pop("seeds", "0"), "seeds", int)
        args.setdefault("out", "runs/compare")
        values = settings_from_args(args)
        base = parse_config(values, given_names(values))
        from fedpfn.runtime.compare import compare

        command = f"{prog} " + shlex.join(sys.argv[1:] if argv is None else argv)
        compare(base, algorithms, seeds, command, given=given_names(values))
    except (ConfigError, UserInterrupt) as err:
        return fail(str(err), err.exit_code)
    return 0  # compare ended with its table and a next: line naming the report it wrote

