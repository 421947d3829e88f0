#!/usr/bin/env python
"""Run one federated simulation (or resume one) on Flower's Ray simulation engine.

    python run_sim.py --algorithm fedpfn --dataset fmnist --model cnn --rounds 20 --out runs/pfn

Every setting of `fedpfn.core.config.RunConfig` and of every algorithm is a flag (`--anchor-ratio`,
`--prox-mu`, `--client-gpus`, ...); `--config FILE.toml` supplies the same settings from a
file and flags override it. Bad settings are reported one per line with exit code 2, before
Ray starts and before the run folder is touched.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path
from typing import Any

from fedpfn.core.config import ConfigError, RunConfig
from fedpfn.runtime.algorithms import parse_config, validated
from fedpfn.runtime.server import WorkerLost
from fedpfn.core.settings import add_flags, read_toml


def build_parser() -> argparse.ArgumentParser:
    from fedpfn.runtime.algorithms import algorithm_names, hparam_classes
    from strategies import SERVER_RULES

    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], argument_default=argparse.SUPPRESS, allow_abbrev=False
    )
    parser.add_argument("--config", metavar="FILE", help="TOML file with settings (flags override it)")
    parser.add_argument(
        "--resume", metavar="DIR", help="continue the run in DIR from its last checkpoint (with --rounds N: to N rounds)"
    )
    parser.add_argument(
        "--compare", metavar="ALGOS", help="comma-separated algorithms to run on the same partitions and seeds into --out"
    )
    parser.add_argument("--seeds", metavar="SEEDS", help="comma-separated seeds for --compare (default: 0)")
    add_flags(parser, RunConfig, skip=("hparams", "algorithm", "server"))
    parser.add_argument(
        "--algorithm",
        help=f"client algorithm: {', '.join(algorithm_names())}, or fedpfn+RULE / fedpnu+RULE (default: fedavg)",
    )
    parser.add_argument(
        "--server", help=f"server algorithm: {', '.join(SERVER_RULES)}, or package.module:Class (default: fedavg)"
    )
    for cls in hparam_classes():
        add_flags(parser, cls)
    return parser


def config_from_args(args: dict[str, Any]) -> RunConfig:
    """Defaults, then the TOML file, then the flags."""
    values: dict[str, Any] = {}
    if "config" in args:
        values.update(read_toml(args.pop("config")))
    values.update(args)
    return parse_config(values)


def fail(message: str) -> int:
    for line in message.splitlines():
        print(f"error: {line}", file=sys.stderr)
    return 2


def main(argv: list[str] | None = None) -> int:
    args = vars(build_parser().parse_args(argv))
    if "compare" in args or "seeds" in args:
        return compare_main(args, argv)
    resume_dir = args.pop("resume", None)
    try:
        from fedpfn.runtime.simulation import resume_config, simulate

        if resume_dir is not None and "config" in args:
            raise ConfigError("resume: --config cannot be combined with --resume (the run keeps its settings)")
        cfg = resume_config(resume_dir, args) if resume_dir else validated(config_from_args(args))
        simulate(cfg, resume=resume_dir is not None)  # prints a header, the rounds and a summary
    except ConfigError as err:
        return fail(str(err))
    except WorkerLost as err:
        return stopped(str(err), cfg.run_dir)
    return 0


def stopped(reason: str, run_dir: Path) -> int:
    """A run that stopped on a fault: why, where, and how to continue (its folder is resumable)."""
    from fedpfn.runtime.runfolder import RunFolder

    print(f"error: {reason}", file=sys.stderr)
    print(RunFolder(run_dir).stop_message(), file=sys.stderr)
    return 1


def compare_main(args: dict[str, Any], argv: list[str] | None) -> int:
    """`--compare A,B --seeds 0,1`: every algorithm on every seed, then tables and a plot."""
    try:
        from fedpfn.runtime.compare import parse_list

        algorithms = parse_list(args.pop("compare", "fedavg"), "compare")
        seeds = parse_list(args.pop("seeds", "0"), "seeds", int)
        args.setdefault("out", "runs/compare")
        base = config_from_args(args)
        from fedpfn.runtime.compare import compare

        command = "python run_sim.py " + shlex.join(sys.argv[1:] if argv is None else argv)
        compare(base, algorithms, seeds, command)
    except ConfigError as err:
        return fail(str(err))
    print(f"comparison written to {base.run_dir}: comparison.md, .csv, .json, .png and paired_differences.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
