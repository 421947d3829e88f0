#!/usr/bin/env python
"""Run one federated simulation, a comparison, or the rest of a stopped run, on this machine.

    python run_sim.py --algorithm fedpfn --dataset fmnist --model cnn --rounds 20 --out runs/pfn
    python run_sim.py --algorithm fedpfn rounds=20 alpha=0.1      # KEY=VALUE, as `flwr run` takes them

The design's entry point, and the same command as `fedpfn run` (`fedpfn.cli.simulate`): every
setting is a flag and a KEY=VALUE override, `--config FILE.toml` supplies them from a file, and
bad settings are reported one per line with exit code 2 before anything starts.
"""

from __future__ import annotations

import sys

if __name__ == "__main__":
    from fedpfn.cli.early import stop_cleanly_from_now

    stop_cleanly_from_now()  # before torch, Ray and Flower load

from fedpfn.cli.simulate import build_parser, config_from_args, main, parse_args  # noqa: E402

__all__ = ["build_parser", "config_from_args", "main", "parse_args"]

if __name__ == "__main__":
    sys.exit(main())
