"""The figures on 1, 3 and 8 arms, drawn: whole round ticks that fit the run, nulls skipped, one
colour per arm with a legend that matches, paired panels on one x range, display names, a
column's width with no text under 7 pt. tests/unit/test_figures.py reads the saved files."""

from __future__ import annotations

import random

import matplotlib.pyplot as plt
import numpy as np
import pytest
from matplotlib.colors import to_hex

from fedpfn.analysis.plots import (
    COLUMN_WIDTH,
    MIN_FONT_PT,
    PairedSeries,
    comparison_figure,
    display_name,
    paired_figure,
    run_figure,
    seed_matrix,
    setting_text,
)

ALGORITHMS = [
    "fedavg",
    "fedprox",
    "scaffold",
    "feddyn",
    "moon",
    "fedpfn",
    "fedpnu anchor_ratio=0.2",
    "fedpfn+scaffold",
]
TITLE = "fmnist cnn · 20 clients, 10 a round · Dirichlet α=0.5 · 3 rounds · seeds 0, 1, 2"


def rows(seed: int, rounds: int = 3, skip: tuple[int, ...] = ()) -> list[dict]:
    """A run's metrics rows; rounds in `skip` were not evaluated (null accuracy and loss)."""
    rng = random.Random(seed)
    return [
        {"round": r, "test_accuracy": None if r in skip else 0.5 + 0.1 * r + rng.uniform(-0.02, 0.02),
         "test_loss": None if r in skip else 1.0 / r, "train_loss": 1.2 / r}
        for r in range(1, rounds + 1)
    ]  # fmt: skip


def assert_round_ticks_fit(fig: plt.Figure, last: int) -> None:
    """Every 'round' axis shows whole rounds within 1..last (3 rounds gave 1.25, 1.5 before)."""
    fig.canvas.draw()
    round_axes = [ax for ax in fig.axes if ax.get_xlabel() == "round"]
    assert round_axes
    for ax in round_axes:
        low, high = ax.get_xlim()
        ticks = [t for t in ax.get_xticks() if low <= t <= high]
        assert ticks and all(t == round(t) and 1 <= t <= last for t in ticks), ticks


def assert_paper_column(fig: plt.Figure) -> None:
    """3.3 in wide, and no text under 7 pt: readable where a paper prints it."""
    assert fig.get_figwidth() == pytest.approx(COLUMN_WIDTH)
    sizes = [t.get_fontsize() for t in fig.findobj(plt.Text) if t.get_text().strip()]
    assert sizes and min(sizes) >= MIN_FONT_PT, min(sizes)


def legend_colors(fig: plt.Figure) -> dict[str, str]:
    return {text.get_text(): to_hex(handle.get_color()) for legend in fig.legends
            for handle, text in zip(legend.legend_handles, legend.get_texts()) if hasattr(handle, "get_color")}  # fmt: skip


@pytest.mark.parametrize("arms", [1, 3, 8])
def test_comparison_figure_gives_each_arm_its_own_colour_and_a_matching_legend(arms: int) -> None:
    curves = {name: [rows(seed) for seed in range(3)] for name in ALGORITHMS[:arms]}
    fig = comparison_figure(curves, TITLE)
    assert_round_ticks_fit(fig, 3)
    assert_paper_column(fig)
    shown = legend_colors(fig)
    names = [display_name(name) for name in curves]
    assert all(name in shown for name in names)
    assert len({shown[name] for name in names}) == arms  # distinct
    lines = {line.get_label(): to_hex(line.get_color()) for line in fig.axes[0].get_lines()}
    assert all(lines[name] == shown[name] for name in names)  # the legend is the drawing's
    assert "± 1 std over seeds (n-1)" in [
        t.get_text() for t in fig.legends[0].get_texts()
    ]  # the band is named
    assert fig.get_suptitle().replace("\n", " ") == TITLE
    plt.close(fig)


def test_band_is_the_n_minus_1_std_of_evaluated_rounds_in_percent() -> None:
    runs = [rows(seed, rounds=5, skip=(2, 4)) for seed in range(3)]
    rounds, acc = seed_matrix(runs)
    assert rounds.tolist() == [1, 3, 5]
    fig = comparison_figure({"fedavg": runs}, TITLE)
    vertices = fig.axes[0].collections[0].get_paths()[0].vertices
    mean, std = 100 * acc.mean(0), 100 * acc.std(0, ddof=1)
    for x, upper, lower in zip(rounds, mean + std, mean - std):
        ys = vertices[vertices[:, 0] == x, 1]
        assert ys.max() == pytest.approx(upper) and ys.min() == pytest.approx(lower)
    line = fig.axes[0].get_lines()[0]
    assert line.get_xdata().tolist() == [1, 3, 5] and np.allclose(line.get_ydata(), mean)
    assert fig.axes[0].get_ylabel() == "test accuracy (%)"
    plt.close(fig)


def test_run_figure_skips_unevaluated_rounds_and_draws_local_accuracy_when_recorded() -> None:
    data = rows(0, rounds=4, skip=(1, 3))
    fig = run_figure(data, "fedpfn · " + TITLE)
    assert_round_ticks_fit(fig, 4)
    assert_paper_column(fig)
    accuracy_line = fig.axes[0].get_lines()[0]
    assert accuracy_line.get_xdata().tolist() == [2, 4]
    assert accuracy_line.get_ydata()[0] == pytest.approx(100 * data[1]["test_accuracy"])  # percent
    assert [line.get_xdata().tolist() for line in fig.axes[1].get_lines()][-1] == [1, 2, 3, 4]  # train loss
    assert len(fig.axes[0].get_lines()) == 1  # nothing local was recorded
    assert fig.get_suptitle().replace("\n", " ") == "fedpfn · " + TITLE
    plt.close(fig)
    local = [{**row, "local_accuracy_before_mean": 0.4, "local_accuracy_after_mean": 0.6} for row in data]
    fig = run_figure(local, config={"dataset": "fmnist", "model": "cnn", "num_clients": 20, "clients_per_round": 10,
                                    "partition": "dirichlet", "alpha": 0.1, "lr": 0.05, "server": "fedavgm",
                                    "algorithm": "fedpfn", "anchor_ratio": 0.4})  # fmt: skip
    labels = [line.get_label() for line in fig.axes[0].get_lines()]
    assert "local test, before training (mean)" in labels and "local test, after training (mean)" in labels
    for part in ("α=0.1", "lr 0.05", "server FedAvgM", "ρ=0.4"):
        assert part in fig.get_suptitle().replace("\n", " "), part
    plt.close(fig)


@pytest.mark.parametrize("arms", [1, 3, 7])
def test_paired_panels_share_one_x_range_and_flag_intervals_of_zero_width(arms: int) -> None:
    series = [PairedSeries(name, [1.0, -0.5, 2.0], 0.83, -1.0, 2.7) for name in ALGORITHMS[1 : arms + 1]]
    series[0] = PairedSeries(series[0].label, [0.5, 0.5], 0.5, 0.5, 0.5)  # 2 seeds that agree
    wide = [PairedSeries(s.label, [-10.0, 20.0], 5.0, None, None) for s in series]
    fig = paired_figure({"mean of last 5 of 20 rounds": series, "final round": wide}, "fedavg", TITLE)
    assert_paper_column(fig)
    for ax in fig.axes:
        assert [t.get_text().replace("\n", " ") for t in ax.get_yticklabels()] == [
            display_name(n) for n in ALGORITHMS[1 : arms + 1]
        ]
    assert len({ax.get_xlim() for ax in fig.axes}) == 1  # one shared range
    low, high = fig.axes[0].get_xlim()
    assert low < -10 and high > 20  # it holds the wide panel's points too
    flags = [t.get_text() for t in fig.axes[0].texts]
    assert flags == ["⚠ CI of zero width"]
    assert (
        all(t.get_text() == "⚠ no CI: 1 seed" for t in fig.axes[1].texts) and len(fig.axes[1].texts) == arms
    )
    same = PairedSeries("fedpfn", [0.3, 0.3 + 1e-15], 0.3, None, None)  # differences equal: no test, said so
    flagged = paired_figure({"final round": [same]}, "fedavg", TITLE)
    assert [t.get_text() for t in flagged.axes[0].texts] == ["⚠ no CI: every seed the same"]
    plt.close(flagged)
    assert "FedAvg" in fig.axes[-1].get_xlabel()
    texts = [t.get_text() for legend in fig.legends for t in legend.get_texts()]
    assert "95 % CI (Student's t)" in texts
    plt.close(fig)


def test_long_arm_names_leave_the_curves_most_of_the_column() -> None:
    """Six arms named by three settings each (the drift study's) once squeezed the curves to a sliver."""
    labels = [f"fedpfn anchor_masks={m} anchor_schedule={s} anchor_granularity=neuron" for m in ("shared", "client")
              for s in ("round", "fixed", "never")]  # fmt: skip
    fig = comparison_figure({label: [rows(seed) for seed in range(3)] for label in labels}, TITLE)
    fig.canvas.draw()
    assert fig.axes[0].get_position().width > 0.5
    assert all(max(map(len, t.get_text().splitlines())) <= 24 for t in fig.axes[1].get_yticklabels())
    plt.close(fig)


def test_display_names_are_a_readers_not_code() -> None:
    assert display_name("fedpnu anchor_ratio=0.2") == "FedPNU (ρ = 0.2)"
    assert display_name("fedpfn server=fedadam") == "FedPFN (server FedAdam)"
    assert display_name("fedpfn+scaffold anchor_schedule=fixed") == "FedPFN+SCAFFOLD (anchors fixed)"
    assert display_name("fedavg server=flwr.serverapp.strategy:Krum") == "FedAvg (server Krum)"


def test_setting_text_names_the_partition_and_a_runs_own_settings() -> None:
    base = {"dataset": "fmnist", "model": "cnn", "num_clients": 20, "clients_per_round": 10}
    assert setting_text({**base, "partition": "dirichlet", "alpha": 0.1}) == (
        "fmnist cnn · 20 clients, 10 a round · Dirichlet α=0.1"
    )
    assert setting_text({**base, "partition": "iid"}).endswith("· IID")
    shards = {**base, "partition": "shards", "shards_per_client": 2}
    assert setting_text(shards).endswith("· 2 shards per client")
    run = {
        **base,
        "partition": "iid",
        "lr": 0.1,
        "server": "fedavg",
        "algorithm": "fedpnu",
        "anchor_ratio": 0.6,
    }
    assert setting_text(run).endswith("· IID · lr 0.1 · server FedAvg · ρ=0.6")
