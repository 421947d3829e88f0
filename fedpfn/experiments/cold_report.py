"""What the ColD command writes for a reader: the setting, each arm over seeds, the paired comparisons
and what each supports.

Accuracies are test-set figures in percent; differences in percentage points (pp). Spread over
seeds is one sample standard deviation (n − 1); comparisons give Student's paired t 95 % interval,
the p-value Holm-adjusted within each metric over the comparisons computed, and the minimum
detectable effect at 80 % power (fedpfn.analysis.stats); verdicts are fedpfn.analysis.render's.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from fedpfn.analysis.inference import Paired, mean_std, retested
from fedpfn.analysis.markup import table
from fedpfn.analysis.plots import OKABE_ITO, finish, line_key, mean_over_seeds, new_figure, save, seed_key, styled
from fedpfn.analysis.render import verdict
from fedpfn.experiments.cold_eval import ARMS, METRICS
from fedpfn.experiments.soup_report import comparison_rows
from partitions.tasks import HELD_OUT_TASKS, TASK_NAMES

SCALES = {metric: (100.0, 2) for metric in METRICS}
HEADERS = {"own_task_acc": "own tasks, own heads (%)", "linear_acc": "held-out, linear probe (%)",
           "full_acc": "held-out, full fine-tune (%)"}  # fmt: skip
ARM_WORDS = {
    "start": "the pretrained start, no fusion (reference)",
    "plain": "ColD fusion, bodies averaged (FedAvg)",
    "shared": "ColD fusion with one anchor mask a round shared by every contributor (FedPFN)",
    "independent": "ColD fusion with each contributor its own mask at the same ratio (the control)",
}


def _cell(values: list[float]) -> str:
    if not values:
        return "–"
    mean, std = mean_std([100 * v for v in values])
    return f"{mean:.2f}" + (f" ± {std:.2f}" if std is not None else "")


def setting_text(result: Mapping[str, Any]) -> str:
    cfg, local = result["config"], result["runs_local"]
    return (
        f"Start: `{cfg['start']}` ({cfg['model']}). {cfg['contributors']} contributors, task k mod "
        f"{len(TASK_NAMES)} of {', '.join(TASK_NAMES)}, each with its own head (`--personal 'classifier.*'`); "
        f"{cfg['rounds']} rounds of {cfg['local_epochs']} local epoch(s), {local['optimizer']} lr {cfg['lr']} (momentum {local['momentum']}, weight decay {local['weight_decay']}), "
        f"batch {cfg['batch_size']}; every contributor every round. Contributors train on "
        f"{100 * (1 - cfg['unseen_fraction']):g} % of the training set; the other {100 * cfg['unseen_fraction']:g} % "
        f"(the runs' validation share) is unseen. Anchors: ratio {cfg['anchor_ratio']}, {cfg['granularity']} level. "
        f"Held-out tasks: {', '.join(HELD_OUT_TASKS)}; a fresh head from the seed fitted on {cfg['probe_samples']} "
        f"unseen samples for {cfg['probe_epochs']} epoch(s) (Adam, lr {cfg['probe_lr']}), body fixed (linear) or "
        f"trained (full). Test: {cfg['test_subset'] or 'all'} Fashion-MNIST test images, each task's own classes."
    )


def start_check(arms: Mapping[str, list[dict[str, Any]]]) -> str:
    """Whether the reference is the start file and every run began from it, bit for bit (read, not assumed)."""
    started = all(r["started_at_start"] for arm in ARMS if arm != "start" for r in arms[arm])
    is_file = all(r["is_start_file"] for r in arms["start"])
    word = {True: "yes", False: "NO"}
    return (f"Checked bit for bit: the reference equals the start file: {word[is_file]}; every run's "
            f"round-0 model equals the reference: {word[started]}.")  # fmt: skip


def arm_rows(arms: Mapping[str, list[dict[str, Any]]]) -> list[str]:
    """Each arm over seeds: the three metrics, then each held-out task under both probes."""
    tasks = [(task, kind) for task in HELD_OUT_TASKS for kind in ("linear", "full")]
    head = ["arm", *(HEADERS[m] for m in METRICS), *(f"{task}, {kind} (%)" for task, kind in tasks)]
    rows = []
    for arm in ARMS:
        runs = arms[arm]
        cells = [_cell([r[m] for r in runs if m in r]) for m in METRICS]
        cells += [_cell([r["held_out"][kind][task]["acc"] for r in runs]) for task, kind in tasks]
        rows.append([arm, *cells])
    return table(head, rows)


def reading(comparisons: list[Paired]) -> list[str]:
    """What each comparison supports after Holm, in words (a 'not resolved' says what it excludes)."""
    lines = []
    for p in comparisons:
        mean = f"{100 * p.mean:+.2f} pp"
        interval = (
            f" [{100 * p.low:+.2f}, {100 * p.high:+.2f}]" if p.low is not None and p.high is not None else ""
        )
        lines.append(
            f"- {p.label}, {HEADERS[p.metric].removesuffix(' (%)')}: {mean}{interval}: {verdict(p)}."
        )
    return lines


def markdown(result: Mapping[str, Any]) -> str:
    """The setting, the arms, the comparisons and the reading."""
    arms = result["arms"]
    seeds = len(arms["plain"])
    comparisons = retested(result["comparisons"], dict.fromkeys(METRICS, 1.0))  # accuracies
    lines = [
        f"# ColD fusion: fmnist {result['config']['model']}, {seeds} seed{'s' * (seeds > 1)}", "",
        setting_text(result), "",
        "Arms: " + "; ".join(f"**{arm}**: {ARM_WORDS[arm]}" for arm in ARMS) + ".", "",
        start_check(arms), "",
        ("Test accuracy, mean ± std over seeds (n − 1). Own tasks: the final fused body with each contributor's "
         "own head (its client state), mean over contributors. Held-out: mean over the held-out tasks."), "",
        *arm_rows(arms), "",
        "Paired by seed (arm − arm on the same seed); Holm within each metric.", "",
        *comparison_rows(comparisons, SCALES), "",
        "What each comparison supports (95 % interval; Holm-adjusted test at 0.05):", "",
        *reading(comparisons),
    ]  # fmt: skip
    return "\n".join(lines) + "\n"


def seed_rows(arms: Mapping[str, list[dict[str, Any]]], shown: list[str], metric: str) -> list[list[float]]:
    """`metric` (%) of each seed (a row) in each of the `shown` arms, paired by seed."""
    by_seed = [{r["seed"]: 100 * r[metric] for r in arms[arm]} for arm in shown]
    return [[values[seed] for values in by_seed] for seed in sorted(set.intersection(*map(set, by_seed)))]


def _own_panel(ax: Any, arms: Mapping[str, list[dict[str, Any]]], color: str) -> None:
    """The fused body with each contributor's own head, per fused arm: every contributor (dots), each
    seed's mean over contributors (thin, for few seeds) and the mean over seeds ± 1 std."""
    fused = [arm for arm in ARMS if all("own_task_acc" in r for r in arms[arm])]
    x = [ARMS.index(arm) for arm in fused]
    for i, arm in zip(x, fused):
        points = [100 * c["acc"] for r in arms[arm] for c in r.get("contributors", {}).values()]
        ax.scatter([i - 0.15] * len(points), points, color="0.6", s=5, zorder=1)
    rows = seed_rows(arms, fused, "own_task_acc")
    mean = mean_over_seeds(ax, x, rows, color, marker="o", band=False)
    if len(rows) > 1:
        ax.errorbar(x, mean, yerr=np.std(rows, axis=0, ddof=1), fmt="none", color=color, capsize=2)
    ax.set_ylabel("own tasks (%)")


def _held_out_panel(ax: Any, arms: Mapping[str, list[dict[str, Any]]], color: str) -> None:
    """Held-out tasks with a fresh head, every arm and the start: linear probe solid, full fine-tune dashed."""
    for metric, style in (("linear_acc", "-"), ("full_acc", "--")):
        rows = seed_rows(arms, list(ARMS), metric)
        mean_over_seeds(ax, range(len(ARMS)), rows, color, linestyle=style, marker="o", band=False)
    ax.set_ylabel("held-out tasks (%)")


@styled
def cold_figure(result: Mapping[str, Any]) -> Figure:
    """The arms on the contributors' own tasks, then on the held-out tasks, from cold.json alone (the
    final fused body; cold.json keeps no per-round figures)."""
    fig, axes = new_figure(2, 4.8, sharex=True)
    arms, cfg = result["arms"], result["config"]
    _own_panel(axes[0], arms, OKABE_ITO[5])
    _held_out_panel(axes[1], arms, OKABE_ITO[3])
    axes[1].set_xticks(range(len(ARMS)), list(ARMS))
    axes[1].set_xlim(-0.5, len(ARMS) - 0.5)
    seeds = len(arms["plain"])
    handles = [
        Line2D([], [], color=OKABE_ITO[5], marker="o", label="own tasks: mean over seeds ± 1 std"),
        Line2D([], [], color="0.6", marker="o", ls="", label="own tasks: one contributor"),
        Line2D([], [], color=OKABE_ITO[3], marker="o", label="held-out: mean over seeds"),
        *line_key([("-", "linear probe (body fixed)"), ("--", "full fine-tune")]),
        *seed_key(seeds, band=False),
    ]
    title = (f"ColD fusion, fmnist {cfg['model']}: {cfg['contributors']} contributors, {cfg['rounds']} rounds,\n"
             f"ρ = {cfg['anchor_ratio']:g}, {seeds} seed{'s' * (seeds > 1)}; test set; start: no fusion")  # fmt: skip
    return finish(fig, handles, title)


def draw_figure(result: Mapping[str, Any], path: Path) -> list[Path]:
    """cold.png (`cold_figure`) and its PDF beside it."""
    return save(cold_figure(result), path)
