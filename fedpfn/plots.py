"""Plots a person reads: accuracy and loss per round, and comparisons across algorithms."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib
import numpy as np

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def plot_run(rows: list[dict[str, Any]], path: Path, title: str = "") -> None:
    """Test accuracy (left) and test/train loss (right) against the round."""
    rounds = [r["round"] for r in rows]
    fig, (acc_ax, loss_ax) = plt.subplots(1, 2, figsize=(10, 4))
    acc_ax.plot(rounds, [r["test_accuracy"] for r in rows], marker=".")
    acc_ax.set(xlabel="round", ylabel="test accuracy", title=f"{title} accuracy".strip())
    acc_ax.grid(alpha=0.3)
    loss_ax.plot(rounds, [r["test_loss"] for r in rows], marker=".", label="test")
    loss_ax.plot(rounds, [r["train_loss"] for r in rows], marker=".", label="train (clients)")
    loss_ax.set(xlabel="round", ylabel="cross-entropy", title=f"{title} loss".strip())
    loss_ax.grid(alpha=0.3)
    loss_ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_comparison(curves: dict[str, list[list[dict[str, Any]]]], path: Path) -> None:
    """Mean test accuracy per algorithm with a band from the lowest to the highest seed."""
    fig, ax = plt.subplots(figsize=(8, 5))
    for algorithm, runs in curves.items():
        length = min(len(rows) for rows in runs)
        acc = np.array([[r["test_accuracy"] for r in rows[:length]] for rows in runs])
        rounds = np.arange(1, length + 1)
        (line,) = ax.plot(rounds, acc.mean(0), label=f"{algorithm} ({len(runs)} seeds)")
        ax.fill_between(rounds, acc.min(0), acc.max(0), color=line.get_color(), alpha=0.2)
    ax.set(xlabel="round", ylabel="test accuracy", title="mean over seeds, band: min to max")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
