"""What the soup command writes for a reader: a Markdown table and a one-column figure.

Accuracies are test-set figures in percent (the soups were selected on the held-out split);
differences are in percentage points (pp), loss barriers in nats. Spread over seeds is one
sample standard deviation (n - 1); paired comparisons give Student's t 95 % interval, the
p-value Holm-adjusted within each metric, and the minimum detectable effect at 80 % power.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from fedpfn.analysis.inference import Paired, mean_std, retested
from fedpfn.analysis.markup import table
from fedpfn.analysis.paired_text import mde_notes, p_number, p_text, test_note
from fedpfn.analysis.plots import OKABE_ITO, SEED_LINES_MAX, finish, new_figure, save, styled
from fedpfn.experiments.soup_run import ARMS, SPANS

COLUMNS = (  # (header, metric, scale, decimals)
    ("mean ingredient (%)", "mean_ingredient_acc", 100, 2),
    ("best ingredient (%)", "best_acc", 100, 2),
    ("uniform soup (%)", "uniform_acc", 100, 2),
    ("greedy soup (%)", "greedy_acc", 100, 2),
    ("ensemble (%)", "ensemble_acc", 100, 2),
    ("uniform − best (pp)", "uniform_gain", 100, 2),
    ("greedy − best (pp)", "greedy_gain", 100, 2),
    ("loss barrier (nats)", "loss_barrier", 1, 3),
    ("acc barrier (pp)", "acc_barrier", 100, 2),
)
SCALE = {metric: (scale, decimals) for _, metric, scale, decimals in COLUMNS}
SOUPS = (
    ("best_acc", "best ingredient", "^"),
    ("uniform_acc", "uniform soup", "s"),
    ("greedy_acc", "greedy soup", "D"),
)


def _cell(values: Sequence[float], scale: float, decimals: int) -> str:
    mean, std = mean_std([scale * v for v in values])
    return f"{mean:.{decimals}f}" + (f" ± {std:.{decimals}f}" if std is not None else "")


def _number(value: float | None, scale: float, decimals: int) -> str:
    return "–" if value is None else f"{scale * value:+.{decimals}f}"


def comparison_rows(comparisons: Sequence[Paired], scales: Mapping[str, tuple[float, int]] = SCALE) -> list[str]:
    """One row per comparison and metric: mean difference, 95 % CI, p, Holm's p, MDE, wins;
    `scales`: each metric's (scale, decimals). Below: which test gave p, and why an MDE is missing."""
    rows = table(["comparison", "metric", "mean", "95 % CI", "p", "p (Holm)", "MDE", "wins / ties / seeds"])
    for c in comparisons:
        scale, dec = scales[c.metric]
        ci = "–" if c.low is None or c.high is None else f"[{_number(c.low, scale, dec)}, {_number(c.high, scale, dec)}]"
        p = "–" if c.p_value is None else p_text(c)
        holm = "–" if c.p_holm is None else p_number(c.p_holm)
        mde = "–" if c.mde is None else f"{scale * c.mde:.{dec}f}"
        rows.append(f"| {c.label} | {c.metric} | {_number(c.mean, scale, dec)} | {ci} | {p} | {holm} | {mde} "
                    f"| {c.wins} / {c.ties} / {len(c.seeds)} |")  # fmt: skip
    return [*rows, "", test_note(list(comparisons)), *mde_notes(list(comparisons))]


def markdown(result: Mapping[str, Any]) -> str:
    """The arms' figures over seeds, then every paired comparison, with the setting above them."""
    cfg, arms = result["config"], result["arms"]
    seeds = len(arms["plain"])
    shown = [c for c in COLUMNS if all(c[1] in r for arm in ARMS for r in arms[arm])]  # older results lack some
    lines = [
        f"# Model soups: {cfg['dataset']} {cfg['model']}, K = {cfg['ingredients']}, {seeds} seed{'s' * (seeds > 1)}",
        "",
        (
            f"Start: `{cfg['start']}` ({'fresh classifier from the seed' if cfg['fresh_head'] else 'its classifier'}). "
            f"Downstream: {result['downstream']}; {cfg['train_subset'] or 'all'} training and {cfg['held_out']} "
            f"held-out samples per seed; test: {cfg['test_subset'] or 'all'} samples. Anchors: ratio "
            f"{cfg['anchor_ratio']}, {cfg['granularity']} level. Grid: lr {cfg['lr']}, epochs {cfg['epochs']}, "
            f"augment {cfg['augment']}, label smoothing {cfg['label_smoothing']}; {cfg['optimizer']}, batch {cfg['batch_size']}."
        ),
        "",
        (
            f"Test accuracy, mean ± std over seeds (n − 1); soups and the best ingredient selected on the held-out split; "
            f"barriers signed, mean over the {cfg['ingredients'] * (cfg['ingredients'] - 1) // 2} pairs, {cfg['points']} points."
        ),
        "",
        *table(["arm", *(c[0] for c in shown)],
               [[arm, *(_cell([r[metric] for r in arms[arm]], scale, dec) for _, metric, scale, dec in shown)] for arm in ARMS]),
    ]
    lines += ["", "Paired by seed (arm − arm on the same seed); Holm within each metric.", ""]
    return "\n".join(lines + comparison_rows(retested(result["comparisons"], SPANS))) + "\n"


def _accuracy_panel(ax: Any, arms: Mapping[str, Sequence[Mapping[str, Any]]]) -> None:
    for x, arm in enumerate(ARMS):
        ingredients = [100 * a for r in arms[arm] for a in r["test_acc"]]
        ax.scatter(
            [x - 0.3] * len(ingredients),
            ingredients,
            color="0.6",
            s=6,
            label="ingredient" if x == 0 else None,
        )
        for offset, (metric, label, marker) in enumerate(SOUPS):
            values, at, color = [100 * r[metric] for r in arms[arm]], x - 0.1 + 0.2 * offset, OKABE_ITO[offset + 1]
            mean, std = mean_std(values)
            ax.errorbar(at, mean, yerr=std or 0, fmt=marker, color=color, capsize=2, markersize=4,
                        label=label if x == 0 else None)  # fmt: skip
            if 1 < len(values) <= SEED_LINES_MAX:  # few seeds: each one's own mark beside the mean
                ax.scatter([at + 0.07] * len(values), values, marker=marker, s=7, facecolors="none",
                           edgecolors=color, linewidths=0.5)  # fmt: skip
    ax.set_xticks(range(len(ARMS)), ARMS)
    ax.set_ylabel("test accuracy (%)")


def _paired_panel(ax: Any, comparisons: Sequence[Mapping[str, Any]]) -> None:
    shown = [c for c in comparisons if c["metric"] in ("uniform_acc", "greedy_acc")]
    labels = list(dict.fromkeys(c["label"] for c in shown))
    for c in shown:
        y = labels.index(c["label"]) + (0.15 if c["metric"] == "greedy_acc" else -0.15)
        color = OKABE_ITO[3] if c["metric"] == "greedy_acc" else OKABE_ITO[2]
        ax.scatter([100 * d for d in c["diffs"]], [y] * len(c["diffs"]), color=color, s=8, alpha=0.6)
        if c["low"] is not None:
            ax.errorbar(100 * c["mean"], y, xerr=[[100 * (c["mean"] - c["low"])], [100 * (c["high"] - c["mean"])]],
                        fmt="D", color=color, capsize=2.5, markersize=4)  # fmt: skip
    ax.axvline(0, color="black", linewidth=0.8)
    ax.set_yticks(range(len(labels)), labels)
    ax.set_ylim(len(labels) - 0.5, -0.5)
    ax.set_xlabel("same-seed difference (pp), 95 % CI")
    ax.grid(axis="y", visible=False)


@styled
def soup_figure(result: Mapping[str, Any]) -> Any:
    """Top: every arm's ingredients and soups on the test set. Below: the arms' soups paired by seed."""
    from matplotlib.lines import Line2D

    fig, axes = new_figure(2, 5.0)
    _accuracy_panel(axes[0], result["arms"])
    _paired_panel(axes[1], result["comparisons"])
    seeds = len(result["arms"]["plain"])
    hollow = [Line2D([], [], color="0.4", marker="o", mfc="none", ls="", label="hollow: one seed")]
    handles = axes[0].get_legend_handles_labels()[0] + hollow * (1 < seeds <= SEED_LINES_MAX) + [
        Line2D([], [], color=OKABE_ITO[2], marker="D", ls="", label="uniform soup, paired"),
        Line2D([], [], color=OKABE_ITO[3], marker="D", ls="", label="greedy soup, paired"),
    ]
    cfg = result["config"]
    return finish(fig, handles, f"Model soups, {cfg['dataset']} {cfg['model']}\n"
                  f"K = {cfg['ingredients']} ingredients, ρ = {cfg['anchor_ratio']:g}, {seeds} seeds; test set")  # fmt: skip


def draw_figure(result: Mapping[str, Any], path: Path) -> list[Path]:
    """soup.png (`soup_figure`) and its PDF beside it."""
    return save(soup_figure(result), path)
