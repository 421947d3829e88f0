"""What every figure draws the same way (fedpfn.analysis.plots.marks and style): the excess over the
chord under a barrier, each seed's own line beside a mean of few seeds, a key that says what solid
and dashed mean, texts kept inside the canvas, and the ColD figure from a stored cold.json (issue 41).

No training: the figures are drawn from tiny series, from tests/unit/test_figures.py's lmc.json shape, and
from the stored docs/fusion/*.json."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.lines import Line2D

from fedpfn.analysis.fusion import chord_excess
from fedpfn.analysis.plots import (
    SEED_LINES_MAX,
    PairedSeries,
    bytes_figure,
    comparison_figure,
    keep_inside,
    key_texts,
    new_figure,
    outside_canvas,
    paired_figure,
    run_figure,
    save,
    styled,
)
from fedpfn.experiments import cold, cold_report, lmc_render, soup_report
from tests.support.checks import assert_png_and_pdf
from tests.support.figure_data import lmc_result, rows

ROOT = Path(__file__).resolve().parents[2]
ALPHAS = [i / 10 for i in range(11)]


def stored(name: str) -> dict:
    return json.loads((ROOT / "docs" / "fusion" / f"{name}.json").read_text())


def test_the_excess_over_the_chord_is_0_at_both_ends_and_the_loss_above_the_chord_between():
    straight = [1.0 + 0.5 * a for a in ALPHAS]  # the zero case: a path on its chord
    assert chord_excess(ALPHAS, straight) == pytest.approx([0.0] * 11, abs=1e-12)
    bump = [1.0 + 0.5 * a + 0.3 * math.sin(math.pi * a) for a in ALPHAS]  # the moving case: a barrier
    excess = chord_excess(ALPHAS, bump)
    assert excess[0] == 0.0 and excess[-1] == 0.0  # exactly, not nearly
    assert excess == pytest.approx([0.3 * math.sin(math.pi * a) for a in ALPHAS], abs=1e-12)
    assert all(e > 0 for e in excess[1:-1]) and max(excess) == pytest.approx(0.3)
    dip = [1.0 + 0.5 * a - 0.2 * math.sin(math.pi * a) for a in ALPHAS]  # the sign: a path below its chord
    assert all(e < 0 for e in chord_excess(ALPHAS, dip)[1:-1])


def _labelled(ax, label: str) -> Line2D:
    return next(line for line in ax.lines if line.get_label() == label)


def test_the_lmc_figure_draws_the_loss_minus_its_chord_between_the_loss_and_the_accuracy():
    fig = lmc_render.curves_figure(lmc_result())  # plain's loss bumps 0.3 sin(pi a) over a tilted chord
    loss_ax, excess_ax, acc_ax = fig.axes
    assert excess_ax.get_ylabel() == "loss − chord, nats"
    plain = _labelled(excess_ax, "plain").get_ydata()
    assert plain[0] == 0.0 and plain[-1] == 0.0
    assert list(plain) == pytest.approx([0.3 * math.sin(math.pi * a) for a in ALPHAS], abs=1e-9)
    anchored = _labelled(excess_ax, "shared-0.4").get_ydata()
    assert max(anchored) == pytest.approx(0.1) and max(plain) > max(anchored)  # the barrier, read as a height
    assert max(_labelled(loss_ax, "plain").get_ydata()) > max(plain)  # the loss itself is higher: its chord is not 0


@pytest.mark.parametrize("seeds", [3, SEED_LINES_MAX, SEED_LINES_MAX + 1, 8])
def test_each_seeds_line_is_drawn_beside_a_mean_of_few_seeds_only(seeds: int):
    fig = comparison_figure({arm: [rows(seed) for seed in range(seeds)] for arm in ("fedavg", "fedpfn")})
    per_arm = 1 + (seeds if seeds <= SEED_LINES_MAX else 0)  # the mean, then a thin line per seed
    assert len([a for a in fig.axes[0].get_children() if isinstance(a, Line2D)]) == 2 * per_arm
    thin = [line for line in fig.axes[0].lines if line.get_linewidth() < 1]
    assert len(thin) == 2 * (per_arm - 1)
    assert ("thin: one seed" in key_texts(fig)) == (seeds <= SEED_LINES_MAX)


@pytest.mark.parametrize("seeds", [3, 6])
def test_the_lmc_figure_draws_each_curve_thin_when_there_are_few(seeds: int):
    fig = lmc_render.curves_figure(lmc_result(seeds))
    per_style = 1 + (seeds if seeds <= SEED_LINES_MAX else 0)  # as trained and after matching, two arms
    assert len(fig.axes[0].lines) == 2 * 2 * per_style


def test_the_keys_say_what_solid_and_dashed_mean():
    lmc = key_texts(lmc_render.curves_figure(lmc_result()))
    assert "solid: as trained" in lmc and "dashed: after matching (B matched to A)" in lmc
    assert "thin: one curve (a seed's pair)" in lmc
    cold_key = key_texts(cold_report.cold_figure(stored("cold")))
    assert "solid: linear probe (body fixed)" in cold_key and "dashed: full fine-tune" in cold_key


@styled
def too_wide():
    fig, (ax,) = new_figure(1, 2.0)
    ax.plot([0, 1], [0, 1])
    ax.set_xlabel("a label much longer than one column of a paper can hold at this size, by far")
    fig.suptitle("a title that runs on well past the right edge of a column wide figure, and on")
    return fig


def test_a_text_past_the_canvas_is_wrapped_inside_it_when_saved(tmp_path: Path):
    fig = too_wide()
    assert len(outside_canvas(fig)) == 2  # the instrument sees both cut texts
    save(fig, tmp_path / "wide.png")  # every figure is saved through here, and closed
    FigureCanvasAgg(fig)  # a canvas again, to lay the saved figure out once more
    assert outside_canvas(fig) == [] and "\n" in fig.axes[0].get_xlabel() and "\n" in fig.get_suptitle()
    assert outside_canvas(keep_inside(too_wide())) == []


def test_a_text_wrapped_twice_is_wrapped_from_its_words_not_line_by_line():
    """A panel title beside long tick labels needs more than one try; each try wraps the title as
    written, so no try leaves a line of a word or two where the next words would fit (it did:
    "FedPFN / against / FedAvg, both / at lr 0.03")."""
    title = "H1, anchoring at one step: FedPFN against FedAvg, both at lr 0.03"
    differences = [PairedSeries("alpha=0.1: FedPFN, lr 0.03 − FedAvg, lr 0.03", [0.5, -0.2, 1.0], 0.43, -0.4, 1.3)]
    fig = keep_inside(paired_figure({title: differences}, "fedavg", name=str))
    lines = fig.axes[0].get_title().splitlines()
    assert outside_canvas(fig) == [] and len(lines) > 1 and " ".join(lines) == title
    width = max(map(len, lines))
    assert all(len(line) + 1 + len(after.split()[0]) > width for line, after in zip(lines, lines[1:])), lines


def test_every_figure_keeps_its_texts_inside_the_canvas():
    differences = [PairedSeries(arm, [0.5, -0.2, 1.0], 0.43, -0.4, 1.3) for arm in ("fedpfn", "fedpnu")]
    sent = [[{**row, "bytes_up": 10**6 * row["round"]} for row in rows(seed)] for seed in range(3)]
    figures = {
        "run": run_figure(rows(0), "fedpfn · seed 0 · " + "a long setting " * 6),
        "paired": paired_figure({"final round": differences}, "fedavg"),
        "bytes": bytes_figure({"fedavg": sent}, {"uploaded": ["bytes_up"]}),
        "lmc": lmc_render.curves_figure(lmc_result()),
        "soup": soup_report.soup_figure(stored("soup")),
        "cold": cold_report.cold_figure(stored("cold")),
    }
    assert {name: outside_canvas(keep_inside(fig)) for name, fig in figures.items()} == dict.fromkeys(figures, [])
    assert "thin: one seed" in key_texts(figures["bytes"])  # 3 seeds: each one's line beside the mean
    assert "hollow: one seed" in key_texts(figures["soup"])  # 3 seeds: each one's mark beside the mean


def test_the_cold_figure_is_drawn_from_a_stored_cold_json(tmp_path: Path):
    result = stored("cold")
    fig = cold_report.cold_figure(result)
    own_ax, held_ax = fig.axes
    assert [t.get_text() for t in held_ax.get_xticklabels()] == list(cold.ARMS)
    linear = 100 * np.mean([[r["linear_acc"] for r in result["arms"][arm]] for arm in cold.ARMS], axis=1)
    means = [line for line in held_ax.lines if line.get_linewidth() >= 1]
    assert list(means[0].get_ydata()) == pytest.approx(linear)  # linear probe: start, plain, shared, independent
    assert means[1].get_linestyle() == "--" and len(held_ax.lines) == 2 * (1 + 3)  # 3 seeds: thin lines too
    written = cold_report.draw_figure(result, tmp_path / "cold.png")
    assert written == [tmp_path / "cold.png", tmp_path / "cold.pdf"]
    assert_png_and_pdf(tmp_path / "cold.png")


def test_the_cold_command_writes_its_figure_beside_cold_json(tmp_path: Path, monkeypatch, capsys):
    """cold.main over finished runs, its evaluation stubbed by the stored study's figures: no training."""
    from tests.support.folders import finished_runs

    figures = {key: stored("cold")[key] for key in ("config", "runs_local", "arms", "comparisons")}
    monkeypatch.setattr(cold, "evaluate_study", lambda cfg, runs, log: dict(figures))
    out = tmp_path / "o"
    assert cold.main(["--runs", str(finished_runs(tmp_path / "runs")), "--out", str(out)], "cold") == 0
    assert sorted(p.name for p in out.iterdir()) == sorted(cold.OUTPUT_FILES)
    assert_png_and_pdf(out / "cold.png")
    assert "cold.png" in capsys.readouterr().out
