"""`fedpfn VERB ...`: one installed command for everything the project runs.

    fedpfn run --algorithm fedpfn --rounds 20 --out runs/pfn      # one simulation (python run_sim.py)
    fedpfn resume runs/pfn --rounds 30                            # the rest of a stopped run
    fedpfn VERB --help                                            # the verb's own settings, grouped

Each verb hands its arguments to the command it names, unchanged: the same declared settings,
the same grouped help, the same one-line refusals with exit code 2. The verbs are argparse over
the project's own declared settings (`fedpfn.core.settings`), not click or typer: those would
declare every setting a second time, and the declarations are what the checks, presets and
`flwr run`'s table are generated from.
"""

from __future__ import annotations

import sys

from fedpfn.cli.early import stop_cleanly_from_now

stop_cleanly_from_now()  # before torch, Ray and Flower load: a Ctrl-C in the first second is one line

import difflib  # noqa: E402
import subprocess  # noqa: E402
from collections.abc import Callable  # noqa: E402
from dataclasses import dataclass  # noqa: E402
from pathlib import Path  # noqa: E402

CHECKOUT = Path(__file__).resolve().parents[2]  # scripts/ and benchmarks/ live here, beside the package
PROG_VARIABLE = "FEDPFN_PROG"  # how a checkout script started by a verb spells its command


@dataclass(frozen=True)
class Verb:
    """A verb: what it does, in one line, and how it runs (argv after the verb, its prog name)."""

    about: str
    run: Callable[[list[str], str], int]


def _simulate(argv: list[str], prog: str) -> int:
    from fedpfn.cli.simulate import main

    return main(argv, prog)


HELP = {  # the verbs that lead into `fedpfn run`: their own usage, for --help
    "compare": (
        "usage: {prog} ALGOS [--seeds SEEDS] [--out DIR] [SETTINGS ...]\n\n"
        "Every algorithm of ALGOS (comma-separated, each once) on every seed of --seeds (default 0; give 3 "
        "or more) with the same partitions, each an ordinary run folder under --out (default runs/compare); "
        "then the paired comparison against the first algorithm: comparison.md, .csv, .json and figures. "
        "Run the same command again to reuse finished runs and resume stopped ones. How many seeds a "
        "difference needs, from an earlier comparison's spread: fedpfn seeds-needed DIR --difference 1.\n\n"
        "SETTINGS: every setting of fedpfn run but --algorithm, --seed, --resume and --overwrite "
        "(fedpfn run --help-all lists them)."
    ),
    "resume": (
        "usage: {prog} DIR [--rounds N] [--engine ...] [--tensorboard] [--wandb]\n\n"
        "The rest of the stopped run in DIR, with the settings it was started with: its numbers are those "
        "of one uninterrupted run. --rounds N continues a finished run to N rounds; where it runs and what "
        "logs it (engine, Ray, trackers) may change; any other setting is refused."
    ),
}


def _lead_in(flag: str, first: str, example: str) -> Callable[[list[str], str], int]:
    """A verb that is `fedpfn run FLAG FIRST ...`: its own help, and FIRST required before any flag."""

    def run(argv: list[str], prog: str) -> int:
        verb = prog.split()[-1]
        if argv[:1] in (["-h"], ["--help"]):
            print(HELP[verb].format(prog=prog))
            return 0
        if not argv or argv[0].startswith("-"):
            return _refuse(f"{prog}: give {first} first, e.g. {prog} {example} ({prog} --help)")
        return _simulate([flag, *argv], "fedpfn run")

    return run


def _module(name: str) -> Callable[[list[str], str], int]:
    """A verb that is the `main(argv, prog)` of fedpfn.analysis.NAME or fedpfn.cli.NAME."""

    def run(argv: list[str], prog: str) -> int:
        import importlib

        return importlib.import_module(name).main(argv, prog)

    return run


def _checkout_script(*command: str) -> Callable[[list[str], str], int]:
    """A verb that runs a script of the checkout (it is not part of an installed package); the
    script's help and refusals name the verb (`fedpfn bench`) through PROG_VARIABLE."""

    def run(argv: list[str], prog: str) -> int:
        import os

        script = CHECKOUT / command[-1]
        if not script.is_file():
            return _refuse(f"{prog}: needs the fedpfn checkout ({command[-1]} is not beside the installed package)")
        env = {**os.environ, PROG_VARIABLE: prog}
        done = subprocess.run([*command[:-1], str(script), *argv], cwd=CHECKOUT, env=env, check=False)
        return done.returncode

    return run


VERBS: dict[str, Verb] = {
    "run": Verb("one simulation: every setting a flag (fedpfn run --help)", _simulate),
    "compare": Verb("algorithms on the same seeds, then the report: fedpfn compare A,B --seeds 0,1,2",
                    _lead_in("--compare", "the algorithms", "fedavg,fedpfn --seeds 0,1,2")),  # fmt: skip
    "resume": Verb("the rest of a stopped run: fedpfn resume DIR [--rounds N]",
                   _lead_in("--resume", "the run folder", "runs/pfn --rounds 30")),  # fmt: skip
    "report": Verb("tables, intervals and figures of finished runs", _module("fedpfn.analysis.report")),
    "seeds-needed": Verb("seeds a difference needs (80 % power), from an earlier comparison's or study's spread",
                         _module("fedpfn.study.seeds_needed")),  # fmt: skip
    "align": Verb("how well trained models align: loss barriers, weight matching, P (docs/glossary.md)",
                  _module("fedpfn.experiments.lmc")),  # fmt: skip
    "partition": Verb("write SuperNodes' own partitions (deployment)", _module("fedpfn.cli.partition")),
    "pretrain": Verb("an offline pretrained start (model.safetensors)", _module("fedpfn.experiments.pretrain")),
    "soup": Verb("model soups of fine-tunes, with shared or independent anchors", _module("fedpfn.experiments.soup")),
    "cold": Verb("ColD fusion: evaluates a study's finished runs (studies/fusion/cold.toml)", _module("fedpfn.experiments.cold")),
    "study": Verb("a study declared in one TOML file: fedpfn study status|run|page FILE",
                  _module("fedpfn.cli.study")),  # fmt: skip
    "deploy-local": Verb("a real SuperLink and SuperNodes on this machine (the checkout's script)",
                         _checkout_script("bash", "scripts/deploy_local.sh")),  # fmt: skip
    "bench": Verb("the engines side by side (the checkout's benchmark)",
                  _checkout_script(sys.executable, "benchmarks/bench_engines.py")),  # fmt: skip
}


def _refuse(line: str) -> int:
    print(f"error: {line}", file=sys.stderr)
    return 2


def usage() -> str:
    width = max(map(len, VERBS))
    rows = [f"  {name:<{width}}  {verb.about}" for name, verb in VERBS.items()]
    return "\n".join(["usage: fedpfn VERB [ARGS ...]    (fedpfn VERB --help: the verb's settings)", "",
                      "verbs:", *rows])  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else list(argv)
    from fedpfn.runtime import env

    env.flower_defaults()  # the project's Flower switches, for every verb; a user's own values win
    if not args or args[0] in ("-h", "--help"):
        print(usage(), file=sys.stdout if args else sys.stderr)
        return 0 if args else 2
    verb = VERBS.get(args[0])
    if verb is None:
        near = difflib.get_close_matches(args[0], VERBS, n=1)
        hint = f"; did you mean {near[0]}?" if near else ""
        return _refuse(f"unknown verb '{args[0]}'{hint} (one of {', '.join(VERBS)}; fedpfn --help)")
    from fedpfn.core.user_code import UserInterrupt

    try:
        return verb.run(args[1:], f"fedpfn {args[0]}")
    except UserInterrupt as err:  # a user's code raised KeyboardInterrupt in a verb without a handler of its own
        print(f"error: {err}", file=sys.stderr)
        return err.exit_code


if __name__ == "__main__":
    sys.exit(main())
