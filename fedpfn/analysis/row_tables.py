"""The report's tables read from the runs' own last rows rather than from the seed statistics:
the clients' evaluation (fedpfn.analysis.client_eval) and the privacy budget (`--server-wrap`
with noise): the (ε, δ) each arm's runs had spent by their last round, as the run's own
accountant reported it in metrics.jsonl (its summary.json names the accountant), beside the
noise that bought it. Runs without them are left out, and a report none of whose runs has
them shows no such table.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from typing import Any

from fedpfn.analysis.client_eval import client_eval_table
from fedpfn.analysis.markup import table
from fedpfn.core.settings import ConfigError


def _number(row: dict[str, Any], key: str) -> float | None:
    """A finite non-negative figure of the row, or None where the run recorded none."""
    value = row.get(key)
    if value is None:
        return None
    if type(value) not in (int, float) or not math.isfinite(value) or value < 0:
        raise ConfigError(f"runs: round {row.get('round')}'s {key} is {value!r}, not a finite number >= 0 or null")
    return float(value)


def _spread(values: list[float]) -> str:
    if len(values) < 2:
        return f"{values[0]:.4g}"
    return f"{statistics.fmean(values):.4g} ± {statistics.stdev(values):.2g}"


def privacy_table(labels: Sequence[str], curves: Sequence[Sequence[Sequence[dict[str, Any]]]]) -> list[str]:
    """Markdown lines: one row per arm whose runs spent a budget (`labels[i]`'s runs are `curves[i]`)."""
    lines = []
    for label, runs in zip(labels, curves):
        last = [rows[-1] for rows in runs if rows and _number(rows[-1], "dp_epsilon") is not None]
        if not last:
            continue
        epsilon = [_number(row, "dp_epsilon") or 0.0 for row in last]
        deltas = sorted({_number(row, "dp_delta") for row in last} - {None})
        noise = sorted({_number(row, "dp_noise_multiplier") for row in last} - {None})
        rounds = sorted({int(row["round"]) for row in last})
        lines.append(f"| {label} | {', '.join(map(str, rounds))} | {', '.join(f'{z:g}' for z in noise) or '–'} | "
                     f"{_spread(epsilon)} | {', '.join(f'{d:g}' for d in deltas) or '–'} |")  # fmt: skip
    if not lines:
        return []
    return [
        "",
        "## Privacy budget spent",
        "",
        "Client-level (ε, δ) by each run's last round, from the accountant its summary.json names; mean ± std over seeds.",
        "",
        *table(["arm", "round", "noise multiplier", "ε", "δ"]),
        *lines,
    ]


def row_tables(labels: Sequence[str], curves: Sequence[Sequence[Sequence[dict[str, Any]]]]) -> list[str]:
    """Every table of this module's kind, in the report's order."""
    return client_eval_table(labels, curves) + privacy_table(labels, curves)
