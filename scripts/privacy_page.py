#!/usr/bin/env python
"""Write docs/guide/privacy-results.md from its runs: FedAvg and FedPFN, without noise and at two
noise multipliers of Flower's server-side fixed clipping, test accuracy against the (ε, δ) spent.

    python scripts/privacy_page.py                   # the runs (minutes on 2 CPU cores), then the page
    python scripts/privacy_page.py --out runs/privacy-page

A run whose folder already holds its summary.json is read, not run again; every number on the
page comes from a run folder, and the page names the command of each.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from fedpfn.cli.simulate import checked_config, parse_args  # noqa: E402  (fedpfn run's own flags)
from fedpfn.core.files import SUMMARY  # noqa: E402  (the run folder's names, from their one place)
from fedpfn.runtime.compare import ensure_run  # noqa: E402  (reuse, resume or start: one primitive)

PAGE = ROOT / "docs" / "guide" / "privacy-results.md"
WRAPPER = "flwr.serverapp.strategy:DifferentialPrivacyServerSideFixedClipping"
CLIP = 0.5
SETTINGS = ["--dataset", "fmnist", "--model", "mlp", "--num-clients", "20", "--clients-per-round", "10",
            "--rounds", "10", "--partition", "iid", "--engine-mode", "threads"]  # fmt: skip
ARMS = [(algorithm, noise) for algorithm in ("fedavg", "fedpfn") for noise in (None, 0.5, 2.0)]


def arm_flags(algorithm: str, noise: float | None) -> list[str]:
    flags = ["--algorithm", algorithm, *SETTINGS]
    if noise is not None:
        args = json.dumps({"noise_multiplier": noise, "clipping_norm": CLIP})
        flags += ["--server-wrap", WRAPPER, "--server-wrap-args", args]
    return flags


def run_arm(out: Path, algorithm: str, noise: float | None) -> tuple[Path, list[str]]:
    """The arm's run folder (run now unless finished) and its command."""
    folder = out / f"{algorithm}-{'none' if noise is None else noise}"
    shown = folder.relative_to(ROOT) if folder.is_relative_to(ROOT) else folder
    command = ["fedpfn", "run", *arm_flags(algorithm, noise), "--out", str(shown)]
    ensure_run(checked_config(parse_args([*command[2:-1], str(folder)])))  # reused only with its settings
    return folder, command


def row(folder: Path, command: list[str], algorithm: str, noise: float | None) -> str:
    summary = json.loads((folder / SUMMARY).read_text())
    epsilon = "∞ (no noise)" if noise is None else f"{summary['dp_epsilon']:.3g}"
    delta = "" if noise is None else f"{summary['dp_delta']:g}"
    return (
        f"| {algorithm} | {'none' if noise is None else noise} | {epsilon} | {delta} | "
        f"{100 * summary['final_test_accuracy']:.2f} % | {100 * summary['last5_mean_accuracy']:.2f} % | "
        f"`{shlex.join(command)}` |"
    )


def page(rows: list[str], accountant: str) -> str:
    return "\n".join([
        "# Privacy results: accuracy against ε",
        "",
        "Written by `python scripts/privacy_page.py` from its runs (do not edit by hand). Fashion-MNIST,",
        "the MLP, 20 clients with IID data, 10 a round (q = 0.5), 10 rounds, seed 0; Flower's",
        f"`DifferentialPrivacyServerSideFixedClipping` with clipping norm {CLIP} around FedAvg's and",
        "FedPFN's server side ([Differential privacy](privacy.md)). ε is the client-level budget after",
        "the last round, at δ = 1e-05, from the",
        f"{accountant}.",
        "One seed per arm (each run takes 15-30 s on 2 CPU cores): these numbers show the trade-off's",
        "direction and size on a toy federation, not intervals.",
        "",
        "| algorithm | noise multiplier | ε | δ | final test accuracy | mean of the last 5 | command |",
        "|---|---|---|---|---|---|---|",
        *rows,
        "",
        "With 10 clients a round, the noise on the averaged model is z·C/10 per coordinate; a smaller ε",
        "needs more noise, or more clients a round to average it away, which is why client-level DP is",
        "used with thousands of clients in practice.",
        "",
    ])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "runs" / "privacy-page", help="where the runs go")
    args = parser.parse_args(argv)
    from strategies.privacy import ACCOUNTANT

    rows = []
    for algorithm, noise in ARMS:
        folder, command = run_arm(args.out, algorithm, noise)
        rows.append(row(folder, command, algorithm, noise))
    PAGE.write_text(page(rows, ACCOUNTANT))
    print(f"wrote {PAGE.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
