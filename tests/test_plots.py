"""The figures on 1, 3 and 8 arms: they draw, the round axes count whole rounds, nulls are skipped."""

from __future__ import annotations

import random
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pytest

from fedpfn.analysis.plots import (
    PairedSeries,
    comparison_figure,
    paired_figure,
    plot_comparison,
    plot_paired,
    plot_run,
    run_figure,
    seed_matrix,
    setting_text,
)

ALGORITHMS = ["fedavg", "fedprox", "scaffold", "feddyn", "moon", "fedpfn", "fedpnu", "fedpfn+scaffold"]
TITLE = "fmnist cnn · 20 clients, 10 a round · Dirichlet 0.5 · 3 rounds · seeds 0, 1, 2"


def rows(seed: int, rounds: int = 3, skip: tuple[int, ...] = ()) -> list[dict]:
    """A run's metrics rows; rounds in `skip` were not evaluated (null accuracy and loss)."""
    rng = random.Random(seed)
    return [
        {"round": r, "test_accuracy": None if r in skip else 0.5 + 0.1 * r + rng.uniform(-0.02, 0.02),
         "test_loss": None if r in skip else 1.0 / r, "train_loss": 1.2 / r}
        for r in range(1, rounds + 1)
    ]  # fmt: skip


def assert_integer_round_ticks(fig: plt.Figure) -> None:
    """Every axis labelled 'round' shows whole-number ticks only (3 rounds gave 1.25, 1.5 before)."""
    fig.canvas.draw()
    round_axes = [ax for ax in fig.axes if ax.get_xlabel() == "round"]
    assert round_axes
    for ax in round_axes:
        ticks = ax.get_xticks()
        assert len(ticks) and np.all(ticks == np.round(ticks)), ticks


@pytest.mark.parametrize("arms", [1, 3, 8])
def test_comparison_figure_stays_whole_with_many_arms(tmp_path: Path, arms: int) -> None:
    curves = {name: [rows(seed) for seed in range(3)] for name in ALGORITHMS[:arms]}
    fig = comparison_figure(curves, TITLE)
    assert_integer_round_ticks(fig)
    titled = [ax.get_title() for ax in fig.axes]
    assert all(name in titled for name in curves)  # one panel per arm
    assert "final accuracy per seed" in titled
    texts = [t.get_text() for legend in fig.legends for t in legend.get_texts()]
    assert "± 1 std over seeds (n-1)" in texts  # the band is named
    assert not any(ax.get_legend() for ax in fig.axes)  # the only legend sits outside the axes
    assert fig._suptitle.get_text() == TITLE
    plt.close(fig)
    plot_comparison(curves, tmp_path / "cmp.png", TITLE)
    assert (tmp_path / "cmp.png").stat().st_size > 0


def test_band_is_the_n_minus_1_std_of_evaluated_rounds_only() -> None:
    runs = [rows(seed, rounds=5, skip=(2, 4)) for seed in range(3)]
    rounds, acc = seed_matrix(runs)
    assert rounds.tolist() == [1, 3, 5]
    fig = comparison_figure({"fedavg": runs}, TITLE)
    vertices = fig.axes[0].collections[0].get_paths()[0].vertices
    mean, std = acc.mean(0), acc.std(0, ddof=1)
    for x, upper, lower in zip(rounds, mean + std, mean - std):
        ys = vertices[vertices[:, 0] == x, 1]
        assert ys.max() == pytest.approx(upper) and ys.min() == pytest.approx(lower)
    line = fig.axes[0].get_lines()[-1]
    assert line.get_xdata().tolist() == [1, 3, 5] and np.allclose(line.get_ydata(), acc.mean(0))
    plt.close(fig)


def test_run_figure_skips_unevaluated_rounds(tmp_path: Path) -> None:
    data = rows(0, rounds=4, skip=(1, 3))
    fig = run_figure(data, "fedpfn · " + TITLE)
    assert_integer_round_ticks(fig)
    accuracy_line = fig.axes[0].get_lines()[0]
    assert accuracy_line.get_xdata().tolist() == [2, 4]
    train_line = fig.axes[1].get_lines()[1]
    assert train_line.get_xdata().tolist() == [1, 2, 3, 4]  # clients train every round
    assert fig._suptitle.get_text() == "fedpfn · " + TITLE
    plt.close(fig)
    plot_run(data, tmp_path / "accuracy.png", "fedpfn · " + TITLE)
    assert (tmp_path / "accuracy.png").stat().st_size > 0


@pytest.mark.parametrize("arms", [1, 3, 7])
def test_paired_figure_draws_every_arm(tmp_path: Path, arms: int) -> None:
    series = [PairedSeries(name, [1.0, -0.5, 2.0], 0.83, -1.0, 2.7) for name in ALGORITHMS[1 : arms + 1]]
    panels = {"mean of last 5 of 20 rounds": series, "final round": series}
    fig = paired_figure(panels, "fedavg", TITLE)
    for ax in fig.axes:
        assert [t.get_text() for t in ax.get_yticklabels()] == ALGORITHMS[1 : arms + 1]
        assert "fedavg" in ax.get_xlabel()
    texts = [t.get_text() for legend in fig.legends for t in legend.get_texts()]
    assert "95 % CI, Student's t, n-1 df" in texts
    plt.close(fig)
    plot_paired(panels, "fedavg", tmp_path / "paired.png", TITLE)
    assert (tmp_path / "paired.png").stat().st_size > 0


def test_setting_text_names_the_partition() -> None:
    base = {"dataset": "fmnist", "model": "cnn", "num_clients": 20, "clients_per_round": 10}
    assert setting_text({**base, "partition": "dirichlet", "alpha": 0.1}) == (
        "fmnist cnn · 20 clients, 10 a round · Dirichlet 0.1"
    )
    assert setting_text({**base, "partition": "iid"}).endswith("· IID")
    shards = {**base, "partition": "shards", "shards_per_client": 2}
    assert setting_text(shards).endswith("· 2 shards per client")
