"""One run's figure: accuracy (server and local) over loss, against the round."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from matplotlib.axes import Axes
from matplotlib.figure import Figure

from fedpfn.analysis.plots.style import (
    OKABE_ITO,
    Rows,
    accuracy_points,
    legend_below,
    new_figure,
    round_axis,
    save,
    setting_text,
    styled,
    wrapped,
)

LOCAL_SERIES = (  # (metrics.jsonl key, label, colour, line style): recorded with --local-test-fraction
    ("local_accuracy_before_mean", "local test, before training (mean)", OKABE_ITO[1], "--"),
    ("local_accuracy_after_mean", "local test, after training (mean)", OKABE_ITO[3], "--"),
    ("local_accuracy_after_worst10", "local test, after training (worst 10 %)", OKABE_ITO[4], ":"),
    # recorded with --evaluate-clients: the sampled clients' local test splits, global model
    ("fed_eval_accuracy_weighted", "clients' local test (weighted mean)", OKABE_ITO[2], "-"),
    ("fed_eval_accuracy_p10", "clients' local test (10th percentile)", OKABE_ITO[2], "--"),
    ("fed_eval_accuracy_worst", "clients' local test (worst client)", OKABE_ITO[2], ":"),
    ("fed_eval_personal_accuracy_weighted", "clients' own models (weighted mean)", OKABE_ITO[2], "-."),
)


def _percent_series(ax: Axes, rows: Rows, key: str, label: str, **style: Any) -> bool:
    points = accuracy_points(rows, key)
    if points:
        rounds, values = zip(*points)
        ax.plot(rounds, [100 * v for v in values], marker=".", label=label, **style)
    return bool(points)


@styled
def run_figure(rows: Rows, title: str = "", config: Mapping[str, Any] | None = None) -> Figure:
    """Accuracy (the server's test set, and each client's local split before and after training
    when recorded) over loss, against the round."""
    fig, (acc_ax, loss_ax) = new_figure(2, 4.0, sharex=True)
    split = "val" if any(r.get("val_accuracy") is not None for r in rows) else "test"
    _percent_series(acc_ax, rows, f"{split}_accuracy", f"global model, server {split} set", color="black")
    for key, label, color, style in LOCAL_SERIES:
        _percent_series(acc_ax, rows, key, label, color=color, linestyle=style)
    acc_ax.set(ylabel="accuracy (%)")
    for key, label, color in ((f"{split}_loss", f"{split} loss (server)", OKABE_ITO[5]),
                              ("train_loss", "train loss (mean over clients)", OKABE_ITO[6])):  # fmt: skip
        points = accuracy_points(rows, key)
        if points:
            loss_ax.plot(*zip(*points), marker=".", label=label, color=color)
    loss_ax.set(ylabel="cross-entropy")
    round_axis(loss_ax, max((int(r["round"]) for r in rows), default=1))
    handles = acc_ax.get_legend_handles_labels()[0] + loss_ax.get_legend_handles_labels()[0]
    legend_below(fig, handles)
    setting = f"\n{setting_text(config)}" if config else ""
    fig.suptitle(wrapped((title or "run") + setting))
    return fig


def plot_run(rows: Rows, path: Path, title: str = "", config: Mapping[str, Any] | None = None) -> list[Path]:
    """Save `run_figure` as `path` (PNG) and PDF (the server calls this when a run ends)."""
    return save(run_figure(rows, title, config), path)
