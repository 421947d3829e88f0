#!/usr/bin/env python
"""Run one federated simulation (or resume one) on Flower's Ray simulation engine.

    python run_sim.py --algorithm fedpfn --dataset fmnist --model cnn --rounds 20 --out runs/pfn

Every option of `fedpfn.config.RunConfig` is a flag (`--anchor-ratio`, `--client-gpus`, ...);
`--config FILE.toml` supplies the same settings from a file and flags override it.
Bad settings are reported one per line with exit code 2, before Ray starts.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from typing import Any

from fedpfn.config import ConfigError, RunConfig, read_toml


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
        argument_default=argparse.SUPPRESS,
    )
    parser.add_argument("--config", help="TOML file with settings (flags override it)")
    parser.add_argument("--resume", metavar="DIR", help="continue the killed run in DIR")
    parser.add_argument(
        "--compare",
        metavar="ALGOS",
        help="comma-separated algorithms to run on the same partitions and seeds into --out",
    )
    parser.add_argument("--seeds", metavar="SEEDS", help="comma-separated seeds for --compare")
    for f in dataclasses.fields(RunConfig):
        flag = "--" + f.name.replace("_", "-")
        help_text = f"{f.metadata['help']} (default: {f.default})"
        kind = str(f.type)
        if kind == "bool":
            parser.add_argument(flag, action=argparse.BooleanOptionalAction, help=help_text)
        else:
            parser.add_argument(flag, metavar=f.name.upper(), help=help_text)
    return parser


def config_from_args(args: dict[str, Any]) -> RunConfig:
    """Defaults, then the TOML file, then the flags."""
    values: dict[str, Any] = {}
    if "config" in args:
        values.update(read_toml(args.pop("config")))
    values.update(args)
    return RunConfig.from_dict(values)


def fail(message: str) -> int:
    for line in message.splitlines():
        print(f"error: {line}", file=sys.stderr)
    return 2


def main(argv: list[str] | None = None) -> int:
    args = vars(build_parser().parse_args(argv))
    if "compare" in args or "seeds" in args:
        return compare_main(args, argv)
    try:
        resume_dir = args.pop("resume", None)
        cfg = None if resume_dir else config_from_args(args).validated()  # before torch loads
        from fedpfn.simulation import resume_config, simulate

        if resume_dir:
            cfg = resume_config(resume_dir)
        summary = simulate(cfg, resume=bool(resume_dir))
    except ConfigError as err:
        return fail(str(err))
    print(
        f"done: final accuracy {summary['final_test_accuracy']:.4f} in "
        f"{summary['wall_seconds']:.0f} s; run folder {cfg.run_dir}"
    )
    return 0


def compare_main(args: dict[str, Any], argv: list[str] | None) -> int:
    """`--compare A,B --seeds 0,1`: every algorithm on every seed, then tables and a plot."""
    try:
        from fedpfn.compare import parse_list

        algorithms = parse_list(args.pop("compare", "fedavg"), "compare")
        seeds = parse_list(args.pop("seeds", "0"), "seeds", int)
        args.setdefault("out", "runs/compare")
        base = config_from_args(args)
        from fedpfn.compare import compare

        command = "python run_sim.py " + " ".join(sys.argv[1:] if argv is None else argv)
        table = compare(base, algorithms, seeds, command)
    except ConfigError as err:
        return fail(str(err))
    for row in table:
        print(f"{row['algorithm']:>16}: last-5 accuracy {row['last5_acc_mean']:.4f} ± {row['last5_acc_std']:.4f}")
    print(f"comparison written to {base.run_dir}/comparison.md, .csv and .png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
