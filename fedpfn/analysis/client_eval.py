"""The report's federated-evaluation table (`--evaluate-clients`): how the global model (and the
clients' own, where they keep one) does on the clients' local test splits, beside the server's
central test accuracy: the example-weighted and plain mean, the 10th percentile and the worst client.

Each run contributes its last round the clients evaluated; the table shows the mean over seeds
(± the n-1 standard deviation with two seeds or more). Runs without the figures are left out,
and a report none of whose runs has them shows no table.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

from fedpfn.analysis.markup import table
from fedpfn.core.settings import ConfigError

PREFIX = "fed_eval"  # fedpfn.runtime.federated_eval writes these keys
STATS = ("weighted", "mean", "p10", "worst")
KINDS = (("", "global model"), ("personal_", "each client's own model"))


def last_evaluated(rows: Sequence[dict[str, Any]]) -> dict[str, Any] | None:
    """The run's last row whose clients evaluated (None: they never did)."""
    return next((row for row in reversed(rows) if row.get(f"{PREFIX}_accuracy_mean") is not None), None)


def _accuracy(row: dict[str, Any], key: str) -> float | None:
    value = row.get(key)
    if value is None:
        return None
    if type(value) not in (int, float) or not 0 <= value <= 1:
        raise ConfigError(f"runs: round {row.get('round')}'s {key} is {value!r}, not an accuracy in [0, 1] or null")
    return float(value)


def _cell(values: list[float]) -> str:
    if not values:
        return "–"
    mean = 100 * statistics.fmean(values)
    return f"{mean:.2f}" if len(values) < 2 else f"{mean:.2f} ± {100 * statistics.stdev(values):.2f}"


def client_eval_table(labels: Sequence[str], curves: Sequence[Sequence[Sequence[dict[str, Any]]]]) -> list[str]:
    """Markdown lines: one row per arm and model kind (`labels[i]`'s runs are `curves[i]`)."""
    lines: list[str] = []
    for label, runs in zip(labels, curves):
        last = [row for row in map(last_evaluated, runs) if row is not None]
        for kind, noun in KINDS:
            if not any(_accuracy(row, f"{PREFIX}_{kind}accuracy_mean") is not None for row in last):
                continue
            central = [v for row in last if (v := _accuracy(row, "test_accuracy")) is not None]
            cells = [_cell([v for row in last if (v := _accuracy(row, f"{PREFIX}_{kind}accuracy_{stat}")) is not None])
                     for stat in STATS]  # fmt: skip
            rounds = sorted({int(row["round"]) for row in last})
            lines.append(f"| {label} | {noun} | {', '.join(map(str, rounds))} | {_cell(central)} | {' | '.join(cells)} |")
    if not lines:
        return []
    return [
        "",
        "## Federated evaluation: the clients' local test splits",
        "",
        "Each run's last round the clients evaluated (`--evaluate-clients`), mean over seeds; accuracy in %.",
        "",
        *table(["arm", "model", "round", "central test", "clients, weighted mean", "clients, mean", "10th percentile",
                "worst client"]),
        *lines,
    ]
