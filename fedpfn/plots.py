"""Plots a person reads: accuracy and loss per round, and comparisons across algorithms."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

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
