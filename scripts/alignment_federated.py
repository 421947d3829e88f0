#!/usr/bin/env python
"""The federated alignment study pre-registered in docs/alignment_federated.md.

    nice -n 10 python scripts/alignment_federated.py run   # the runs under runs/alignment-fl/ (restartable)
    python scripts/alignment_federated.py page             # its results, written below the page's marker
    python scripts/alignment_federated.py page --stored    # the same from docs/alignment/federated.json alone

Every run goes through the one primitive (fedpfn.runtime.ensure.ensure_run): reused when it
finished with the same settings, resumed when killed, a folder of other settings refused. The page's numbers and verdicts are computed here from
the runs' metrics.jsonl, with the project's paired statistics (fedpfn.analysis.stats).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from fedpfn.analysis.render import verdict  # noqa: E402
from fedpfn.analysis.stats import Paired, adjust, paired, sign_test  # noqa: E402
from fedpfn.core.files import CLIENTS, METRICS, SUMMARY, atomic_write_bytes, read_jsonl  # noqa: E402
from fedpfn.cli.simulate import checked_config, parse_args  # noqa: E402  (fedpfn run's own flags)
from fedpfn.runtime.ensure import ensure_run  # noqa: E402

RUNS = ROOT / "runs" / "alignment-fl"
PAGE = ROOT / "docs" / "alignment_federated.md"
STORED = ROOT / "docs" / "alignment" / "federated.json"
MARKER = "<!-- results: everything below is written by scripts/alignment_federated.py page -->"
DESIGN = [
    "--dataset", "fmnist", "--model", "mlp", "--num-clients", "100", "--clients-per-round", "5",
    "--partition", "dirichlet", "--alpha", "0.5", "--rounds", "20", "--local-epochs", "3", "--batch-size", "64",
    "--lr", "0.1", "--momentum", "0.9", "--weight-decay", "5e-4", "--local-test-fraction", "0.2",
    "--alignment-every", "2", "--alignment-clients", "3", "--engine", "batched",
]  # fmt: skip
ARMS = {  # the first is the baseline, `fedpfn-client` the control
    "fedavg": ["--algorithm", "fedavg"],
    "fedpfn": ["--algorithm", "fedpfn"],
    "fedpfn-fixed": ["--algorithm", "fedpfn", "--anchor-schedule", "fixed"],
    "fedpfn-client": ["--algorithm", "fedpfn", "--anchor-masks", "client"],
}
SEEDS = range(5)
EARLY = 3  # measurements counted as early (rounds 2, 4, 6)
GATE_REGIME = "mlp-same-init"  # the gate's regime this study carries into a federation
LAST = 5  # evaluated rounds averaged for accuracy


def run_path(arm: str, seed: int) -> Path:
    return RUNS / arm / f"s{seed}"


def run_once(out: Path, flags: list[str]) -> None:
    ensure_run(checked_config(parse_args([*flags, "--out", str(out)])))


def run_all() -> None:
    for seed in SEEDS:  # seed-major: a study cut short still has every arm of its first seeds
        for arm, flags in ARMS.items():
            run_once(run_path(arm, seed), [*DESIGN, *flags, "--seed", str(seed)])


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values)


def _median(values: Sequence[float]) -> float:
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


def _r_values(rows: list[dict[str, Any]]) -> list[float]:
    """The run's measured R, in round order (None: the clients gained nothing locally that round)."""
    return [r["align_retained_fraction"] for r in rows if r.get("align_retained_fraction") is not None]


FIGURES: dict[str, Callable[[list[dict[str, Any]]], float]] = {
    "median R": lambda rows: _median(_r_values(rows)),
    "mean R": lambda rows: _mean(_r_values(rows)),
    "early R": lambda rows: _mean(_r_values(rows)[:EARLY]),
    "mean P (nats)": lambda rows: _mean([r["align_permutation_loss"] for r in rows if "align_permutation_loss" in r]),
    "units moved (%)": lambda rows: 100 * _mean([r["align_moved_fraction"] for r in rows if "align_moved_fraction" in r]),
    "accuracy (points)": lambda rows: 100 * _mean([r["test_accuracy"] for r in rows if r.get("test_accuracy") is not None][-LAST:]),
}  # fmt: skip


def figures() -> dict[str, dict[str, dict[int, float]]]:
    """figure -> arm -> seed -> value, over the finished runs."""
    table: dict[str, dict[str, dict[int, float]]] = {name: {arm: {} for arm in ARMS} for name in FIGURES}
    for arm in ARMS:
        for seed in SEEDS:
            run = run_path(arm, seed)
            if not (run / SUMMARY).exists():
                continue
            rows = read_jsonl(run / METRICS)
            for name, figure in FIGURES.items():
                table[name][arm][seed] = figure(rows)
    return table


def comparisons(table: dict[str, dict[str, dict[int, float]]]) -> tuple[list[Paired], list[Paired]]:
    """The primary family (FedPFN against FedAvg and the control on mean R) and the secondary ones."""
    pairs = (("fedpfn", "fedavg"), ("fedpfn", "fedpfn-client"))
    primary = [paired(f"FedPFN − {base}", "primary", table["median R"][a], table["median R"][base]) for a, base in pairs]
    secondary = []
    for name, by_arm in table.items():
        more = (*pairs, ("fedpfn-fixed", "fedpfn"), ("fedpfn-client", "fedavg"))
        for arm, base in more if name != "median R" else more[2:]:
            secondary.append(paired(f"{name}: {arm} − {base}", name, by_arm[arm], by_arm[base]))
    adjust(primary)
    adjust(secondary)
    return primary, secondary


def table_lines(rows: list[Paired], scale_of: Callable[[Paired], tuple[float, str]]) -> list[str]:
    lines = ["| comparison | mean | 95 % CI | p | sign test p | p Holm | seeds higher | verdict |", "|---" * 8 + "|"]
    for p in rows:
        scale, unit = scale_of(p)
        ci = "n/a" if p.low is None or p.high is None else f"[{p.low:+.3f}, {p.high:+.3f}]"
        sign = sign_test(p.diffs)
        lines.append(
            f"| {p.label} | {p.mean:+.3f} | {ci} | {'n/a' if p.p_value is None else f'{p.p_value:.3g}'} "
            f"| {'n/a' if sign is None else f'{sign:.3g}'} | {'n/a' if p.p_holm is None else f'{p.p_holm:.3g}'} "
            f"| {p.wins} of {len(p.diffs)} | {verdict(p, scale, unit)} |"
        )
    return lines


def results(table: dict[str, dict[str, dict[int, float]]], steps: float) -> str:
    finished = {arm: len(table["median R"][arm]) for arm in ARMS}
    if min(finished.values()) < len(SEEDS):
        return f"## Results\n\nNot finished: seeds per arm {finished} of {len(SEEDS)}.\n"
    primary, secondary = comparisons(table)
    means = ["| arm | " + " | ".join(table) + " |", "|---" * (len(table) + 1) + "|"]
    for arm in ARMS:
        means.append(f"| {arm} | " + " | ".join(f"{_mean(list(table[f][arm].values())):+.3f}" for f in table) + " |")
    unit = lambda p: (1.0, "nats") if "P" in p.label else ((1.0, "points") if "accuracy" in p.label or "%" in p.label else (1.0, "in R"))  # noqa: E731
    return "\n".join([
        "## Results", "", f"Written by `python scripts/alignment_federated.py page` from {len(ARMS) * len(SEEDS)} runs "
        "under runs/alignment-fl/. Means over seeds:", "", *means, "",
        f"### Primary family: median R (Holm across the {sum(p.p_value is not None for p in primary)} tested)", "",
        *table_lines(primary, lambda p: (1.0, "in R")), "", *reading(table, primary, steps), "",
        "### Secondary (exploratory; Holm within each figure)", "",
        *table_lines(secondary, unit), "",
    ])  # fmt: skip


def steps_per_round() -> float:
    """Local steps a client took a round, over every client of every run: ceil(n / batch) x epochs."""
    batch, epochs = (int(DESIGN[DESIGN.index(flag) + 1]) for flag in ("--batch-size", "--local-epochs"))
    sizes = [row["num_examples"] for arm in ARMS for seed in SEEDS
             for row in read_jsonl(run_path(arm, seed) / CLIENTS)]  # fmt: skip
    return _mean([math.ceil(n / batch) * epochs for n in sizes])


def gate_steps() -> int:
    """The steps each of the gate's two models took in its regime (docs/alignment/cells.json)."""
    config = json.loads((ROOT / "docs" / "alignment" / "cells.json").read_text())[GATE_REGIME]["config"]
    trained = config["train_subset"] - math.ceil(config["held_out"] * config["train_subset"])
    return math.ceil(trained / config["batch_size"]) * config["epochs"]


def reading(table: dict[str, dict[str, dict[int, float]]], primary: list[Paired], steps: float) -> list[str]:
    """What the runs say, computed: whether matching found misalignment, and what the primary excludes."""
    p_means = [v for arm in ARMS for v in table["mean P (nats)"][arm].values()]
    moved = [v for arm in ARMS for v in table["units moved (%)"][arm].values()]
    lines = ["**Reading.** Between a round's clients, weight matching found almost no permutation: "
             f"the runs' mean P lies in [{min(p_means):+.4f}, {max(p_means):+.4f}] nats and matching moved "
             f"{min(moved):.2f} to {max(moved):.2f} % of the units on average, in every arm. The gate's two "
             f"models ({GATE_REGIME}, docs/alignment.md) drifted apart over {gate_steps()} steps each on the "
             f"same data; a client here took {steps:.0f} steps a round on average from the global "
             "model, so the misalignment the gate found did not arise within a round, and what averaging cost "
             "the clients here was not permutation."]  # fmt: skip
    for p in primary:
        if p.low is not None and p.high is not None:
            lines.append(f"{p.label} on median R: {p.mean:+.3f}, 95 % CI [{p.low:+.3f}, {p.high:+.3f}]: "
                         f"{'resolved' if p.p_holm is not None and p.p_holm < 0.05 else 'not resolved'}, "
                         f"the interval excludes a difference above {p.high:+.3f} and below {p.low:+.3f}.")  # fmt: skip
    return [" ".join(lines)]


def write_page(stored: bool) -> None:
    """The results below the page's marker, from the runs (kept in docs/alignment/federated.json) or that copy."""
    text = PAGE.read_text()
    if MARKER not in text:
        raise SystemExit(f"error: {PAGE} has lost its results marker; restore it before writing results")
    if stored:
        kept = json.loads(STORED.read_text())
        table = {f: {arm: {int(k): v for k, v in seeds.items()} for arm, seeds in by_arm.items()}
                 for f, by_arm in kept["figures"].items()}  # fmt: skip
        steps = kept["steps_per_round"]
    else:
        table = figures()
        if not any(table["median R"].values()):  # a fresh clone: the published results stay
            raise SystemExit(f"error: no finished run under {RUNS.relative_to(ROOT)}/; {PAGE.relative_to(ROOT)} "
                             "left unchanged (page --stored writes it from docs/alignment/federated.json)")  # fmt: skip
        steps = steps_per_round() if all(len(table["median R"][a]) == len(SEEDS) for a in ARMS) else 0.0
        atomic_write_bytes(STORED, (json.dumps({"figures": table, "steps_per_round": steps}, indent=1) + "\n").encode())
    head = text.split(MARKER)[0]
    atomic_write_bytes(PAGE, (head + MARKER + "\n\n" + results(table, steps)).encode())
    print(f"wrote {PAGE.relative_to(ROOT)}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("stage", choices=("run", "page", "all"))
    parser.add_argument("--stored", action="store_true", help="page: from docs/alignment/federated.json alone")
    args = parser.parse_args(argv)
    if args.stage in ("run", "all"):
        run_all()
    if args.stage in ("page", "all"):
        write_page(args.stored)
    return 0


if __name__ == "__main__":
    sys.exit(main())
