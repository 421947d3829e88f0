"""What `python -m fedpfn.experiments.lmc` writes: the summary table, the figure, lmc.json.

Losses in nats, accuracies in percent, differences in points; every table says where its
figures were measured (test set, each model's own held-out data, or a pair's union).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from fedpfn.analysis.markup import table
from fedpfn.experiments.command import write_files

OUTPUT_FILES = ("lmc.json", "lmc.png", "lmc.pdf")  # all the tool writes into --out; nothing else is touched
DIVERGED = "diverged"  # a seed's key, in place of its figures, saying which model diverged at which lr


COLUMNS = (  # (header, key, scale, decimals)
    ("loss barrier", "loss_barrier", 1, 3),
    ("loss at midpoint − chord", "loss_midpoint", 1, 3),
    ("matched loss barrier", "matched_loss_barrier", 1, 3),
    ("P (nats)", "permutation_loss", 1, 3),
    ("units moved (%)", "moved_fraction", 100, 1),
    ("acc barrier (pp)", "acc_barrier", 100, 2),
    ("fused acc (%)", "fused_acc", 100, 2),
    ("mean own acc (%)", "mean_individual_acc", 100, 2),
    ("gap (pp)", "fusion_gap", 100, 2),
)
BESIDE_COLUMNS = (  # what a barrier and a fusion are read against; shown where the results have them
    ("loss barrier", "loss_barrier", 1, 3),
    ("on training data", "train_loss_barrier", 1, 3),
    ("REPAIRed", "repair_loss_barrier", 1, 3),
    ("midpoint acc (%)", "midpoint_acc", 100, 2),
    ("REPAIRed midpoint acc (%)", "repair_midpoint_acc", 100, 2),
    ("‖A − B‖", "distance", 1, 2),
    ("‖A − π(B)‖", "matched_distance", 1, 2),
    ("fused acc (%)", "fused_acc", 100, 2),
    ("ensemble acc (%)", "ensemble_acc", 100, 2),
    ("ensemble − fused (pp)", "ensemble_gap", 100, 2),
)


def _table(
    first: str, rows: Sequence[tuple[str, Mapping[str, Any]]], columns: Sequence[tuple] = COLUMNS
) -> list[str]:
    cells = [
        [name, *("n/a" if key not in stats else f"{stats[key]['mean'] * scale:+.{dec}f}"
                 + ("" if stats[key]["std"] is None else f" ± {stats[key]['std'] * scale:.{dec}f}")  # null: one seed
                 for _, key, scale, dec in columns)]
        for name, stats in rows
    ]  # fmt: skip
    return table([first, *(c[0] for c in columns)], cells)


def markdown_table(result: Mapping[str, Any]) -> str:
    """Mean ± std over seeds of each figure, one row per arm, then each arm minus plain by seed."""
    settings = result["settings"]
    n = len(settings["plain"]["seeds"])
    where = result["config"]["measured_on"]
    caption = (
        f"measured on: {where}; mean ± std over {n} seed{'s' * (n > 1)} (sample std, n − 1); "
        "barriers signed (negative: the path beats its chord); P = L(avg(A, B)) − L(avg(A, π(B)))"
    )
    lines = [caption, *diverged_notes(settings), ""]
    lines += _table("arm", [(name, entry["summary"]) for name, entry in settings.items()])
    paired = [(f"{name} − plain", entry["vs_plain"]) for name, entry in settings.items() if "vs_plain" in entry]
    if paired:
        lines += ["", *_table("paired by seed", paired)]
    lines += beside_table(result)
    lines += matcher_table(settings)
    return "\n".join(lines)


def diverged_notes(settings: Mapping[str, Any]) -> list[str]:
    """A line per arm with seeds whose models diverged: left out of its figures and its pairs ('n/a' where all)."""
    return [
        f"{name}: diverged in {entry['summary']['diverged_seeds']} of {len(entry['seeds'])} seeds, "
        "left out of its figures and of the pairs with plain"
        for name, entry in settings.items() if entry["summary"].get("diverged_seeds")
    ]  # fmt: skip


def measured(per_seed: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The seeds whose models trained to finite weights: the only ones with figures."""
    return [seed for seed in per_seed if DIVERGED not in seed]


def measured_arms(settings: Mapping[str, Any]) -> dict[str, Any]:
    """The arms with at least one seed measured (an arm whose every seed diverged has no curve)."""
    return {name: entry for name, entry in settings.items() if measured(entry["seeds"])}


def beside_table(result: Mapping[str, Any]) -> list[str]:
    """The loss barrier beside what it is read against (on training data, REPAIRed, ||A - B||) and
    the fused model beside the ensemble, per arm; [] for results written before these figures."""
    settings, config = measured_arms(result["settings"]), result["config"]
    rows = [(name, entry["summary"]) for name, entry in settings.items()]
    columns = [c for c in BESIDE_COLUMNS if all(c[1] in stats for _, stats in rows)]
    new = ("train_loss_barrier", "repair_loss_barrier", "distance", "ensemble_acc")
    if not any(c[1] in new for c in columns):
        return []
    notes = [f"REPAIR: {config['repair']}" if "repair" in config else "",
             f"distance: {config['distance']}" if "distance" in config else ""]  # fmt: skip
    caption = "Beside the barrier (nats) and the fused model; the ensemble averages logits, softmax after. "
    return ["", caption + " ".join(n + "." for n in notes if n), "", *_table("arm", rows, columns)]


def _matcher_cell(figures: Mapping[str, Any], notes: dict[str, str], row: str, matcher: str) -> str:
    """P ± std (nats) and the units moved (a paired row: their difference, in points), or why the
    matcher was omitted; unconverged seeds go to the notes."""
    if "omitted" in figures:
        notes.setdefault(figures["omitted"], f"{matcher} omitted ({row}): {figures['omitted']}")
        return "omitted"
    p, moved = figures["permutation_loss"], figures["moved_fraction"]
    spread = "" if p["std"] is None else f" ± {p['std']:.3f}"
    if figures.get("unconverged_seeds"):
        notes[f"{row} {matcher}"] = f"{matcher} ({row}): weight matching stopped unconverged in {figures['unconverged_seeds']} seed(s)"
    moved_text = f"{100 * moved['mean']:+.0f} pp" if " − " in row else f"{100 * moved['mean']:.0f} %"
    return f"{p['mean']:+.3f}{spread} ({moved_text} moved)"


def matcher_table(settings: Mapping[str, Any]) -> list[str]:
    """P under each matcher by name, per arm and paired with plain; [] for results without matchers."""
    rows = [(name, entry["summary"].get("matchers")) for name, entry in settings.items()]
    rows += [(f"{name} − plain", entry["vs_plain"].get("matchers")) for name, entry in settings.items() if "vs_plain" in entry]
    rows = [(row, found) for row, found in rows if found]  # an arm (or pair) with no seed measured has none
    names = list(rows[0][1]) if rows else []
    if not names:
        return []
    notes: dict[str, str] = {}
    lines = ["", "P (nats) under a permutation that each matcher finds; units moved, mean over seeds", "",
             *table(["arm", *(f"P {m}" for m in names)],
                    [[row, *(_matcher_cell(found[m], notes, row, m) for m in names)] for row, found in rows])]  # fmt: skip
    return lines + ([""] + list(notes.values()) if notes else [])


def band_note(result: Mapping[str, Any]) -> str:
    """What the plot's line and band are: mean and ± 1 sample std over how many curves."""
    arms = measured_arms(result["settings"])
    if not arms:
        return "no curve: every model diverged"
    plain = next(iter(arms.values()))  # plain, unless every plain seed diverged
    seeds, curves = len(measured(plain["seeds"])), plain["summary"]["curve"]["n"]
    over = f"{seeds} seed{'s' * (seeds > 1)}" + (f" x {curves // seeds} pairs" if curves != seeds else "")
    return f"line: mean over {over}; band: ± 1 std (n − 1)" if curves > 1 else f"one curve ({over}), no band"


def plot_title(config: Mapping[str, Any]) -> str:
    """The figure's first line: data, model, K, epochs, split and start."""
    split = (
        f"Dirichlet({config['alpha']:g}) shards" if config["split"] == "dirichlet" else "same data, own batch orders"
    )
    epochs = config["epochs"]
    return (
        f"{config['dataset']} {config['model']}, K = {config['models']}, {epochs} epoch{'s' * (epochs > 1)}, "
        f"{split}, from {config['start']}"
    )


PATHS = (("", "-", "as trained"), ("matched_", "--", "after matching (B matched to A)"), ("repair_", ":", "REPAIRed"))


def curves_of(entry: Mapping[str, Any], key: str) -> list[list[float]]:
    """Every seed's every pair's curve of `key` (loss, matched_acc, ...): the rows a mean is drawn over;
    [] where a curve lacks it (results written before that figure was measured)."""
    curves = [pair for seed in entry["seeds"] for pair in seed.get("pairs", ())]  # a diverged seed has none
    return [pair[key] for pair in curves] if curves and all(key in pair for pair in curves) else []


def _path_panel(ax: Any, entry: Mapping[str, Any], what: str, color: str, label: str) -> None:
    """One arm's mean along the path over its curves (seeds x pairs) as trained (solid), after matching
    (dashed) and REPAIRed (dotted, where measured); the band on the solid line; each curve thin for few.
    `what`: "loss", "acc" (in %) or "excess" (loss − chord, fusion.chord_excess: 0 at both ends)."""
    from fedpfn.analysis.fusion import chord_excess
    from fedpfn.analysis.plots import mean_over_seeds

    alphas = entry["summary"]["curve"]["alpha"]
    for prefix, style, _ in PATHS:
        rows = curves_of(entry, prefix + ("acc" if what == "acc" else "loss"))
        if what == "acc":
            rows = [[100 * v for v in row] for row in rows]
        elif what == "excess":
            rows = [chord_excess(alphas, row) for row in rows]
        if rows:
            shown = None if prefix else label  # one key entry per arm; the line styles have their own
            mean_over_seeds(ax, alphas, rows, color, label=shown, linestyle=style, band=not prefix)


def curves_figure(result: Mapping[str, Any]) -> Any:
    """The LMC figure, one column wide (fedpfn.analysis.plots), returned unsaved for a test to read.

    Top: loss along the straight line between two models, each arm's mean over seeds x pairs,
    solid as trained and dashed after weight matching (the gap between them is what permutation
    accounts for). Middle: the same loss minus its chord (the straight line between the end points'
    losses), so a barrier reads as height above 0 and both ends sit at 0. Below: accuracy.
    """
    # matplotlib is imported here only: the LMC command's checks run without it
    from fedpfn.analysis.plots import OKABE_ITO, finish, line_key, new_figure, seed_key, styled

    def draw() -> Any:
        fig, axes = new_figure(3, 6.2, sharex=True, height_ratios=[1.0, 0.8, 1.0])
        colors = dict(zip(result["settings"], OKABE_ITO))
        for name, entry in measured_arms(result["settings"]).items():
            for ax, what in zip(axes, ("loss", "excess", "acc")):
                _path_panel(ax, entry, what, colors[name], name)
        axes[1].axhline(0, color="black", linewidth=0.8)
        where = result["config"]["measured_on"]
        axes[0].set_ylabel(f"loss, nats ({where})")
        axes[1].set_ylabel("loss − chord, nats")
        axes[2].set_ylabel(f"accuracy, % ({where})")
        axes[-1].set_xlabel("position on the line: 0 = model A, 1 = model B")
        handles = axes[0].get_legend_handles_labels()[0]
        for first in list(measured_arms(result["settings"]).values())[:1]:
            handles += line_key([(style, words) for prefix, style, words in PATHS if curves_of(first, prefix + "loss")])
            handles += seed_key(first["summary"]["curve"]["n"], "one curve (a seed's pair)")
        cfg = result["config"]
        details = f"lr {cfg['lr']}, {cfg['granularity']}-level anchors; {band_note(result)}"
        return finish(fig, handles, f"{plot_title(cfg)}\n{details}")

    return styled(draw)()


def plot_curves(result: Mapping[str, Any], path: Path) -> list[Path]:
    """`curves_figure` as `path` (PNG) and a PDF beside it."""
    from fedpfn.analysis.plots import save

    return save(curves_figure(result), path)


def write_outputs(out: Path, result: Mapping[str, Any]) -> None:
    """Write lmc.json and the figure (drawn in a private folder first, then moved in); each file
    is replaced whole, never written through a link, and nothing else in `out` is touched."""
    write_files(out, {"lmc.json": (json.dumps(result, indent=1) + "\n").encode()},
                lambda staging: plot_curves(result, staging / "lmc.png"))  # fmt: skip
