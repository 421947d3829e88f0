"""The federated alignment study's page (its `page.readings`, READINGS below;
studies/alignment_federated/alignment_federated.toml): what it reads from the finished cells, and its results again
from what it stored (docs/alignment/federated.json) alone.

From the cells: each run's figures (R, P, units moved, accuracy; `FIGURES`) and the clients'
local steps a round, kept in the study's stored file. From that file alone: the means, the
primary family (FedPFN against FedAvg and the control on median R) and the secondary ones, with
the project's paired statistics (fedpfn.analysis.stats), the figure of every comparison of median R
(docs/alignment/federated-median-R.png), and the reading, every sentence computed.
The page is always written from the stored file, so both routes give the same bytes.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from typing import Any

from fedpfn.analysis import markup
from fedpfn.analysis.plots import PairedSeries
from fedpfn.analysis.paired_text import VERDICT_KEY, verdict_cell
from fedpfn.analysis.render import series_of
from fedpfn.analysis.inference import decided
from fedpfn.analysis.stats import Paired, adjust, paired, sign_test
from fedpfn.core.files import CLIENTS, METRICS, DamagedFile, atomic_write_bytes, read_json, read_jsonl
from fedpfn.study.cells import groups, main_cells
from fedpfn.study.figures import reading_figure
from fedpfn.study.readings import Readings
from fedpfn.study.spec import Spec

EARLY = 3  # measurements counted as early (rounds 2, 4, 6)
GATE_REGIME = "mlp-same-init"  # the gate's regime this study carries into a federation
LAST = 5  # evaluated rounds averaged for accuracy
Table = dict[str, dict[str, dict[int, float]]]  # figure -> arm -> seed -> value


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values)


def _median(values: Sequence[float]) -> float:
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


def _r_values(rows: list[dict[str, Any]]) -> list[float]:
    """The run's measured R, in round order (None: the clients gained nothing locally that round)."""
    return [r["align_retained_fraction"] for r in rows if r.get("align_retained_fraction") is not None]


FIGURES: dict[str, Callable[[list[dict[str, Any]]], float]] = {
    "median R": lambda rows: _median(_r_values(rows)),
    "mean R": lambda rows: _mean(_r_values(rows)),
    "early R": lambda rows: _mean(_r_values(rows)[:EARLY]),
    "mean P (nats)": lambda rows: _mean([r["align_permutation_loss"] for r in rows if "align_permutation_loss" in r]),
    "units moved (%)": lambda rows: 100 * _mean([r["align_moved_fraction"] for r in rows if "align_moved_fraction" in r]),
    "accuracy (points)": lambda rows: 100 * _mean([r["test_accuracy"] for r in rows if r.get("test_accuracy") is not None][-LAST:]),
}  # fmt: skip


def figures(spec: Spec) -> Table:
    """figure -> arm -> seed -> value, over the study's (finished) main cells."""
    table: Table = {name: {arm: {} for arm in spec.arms} for name in FIGURES}
    for cell in sorted(main_cells(spec), key=lambda c: (list(spec.arms).index(c.arm), c.seed)):
        rows = read_jsonl(cell.folder / METRICS)
        for name, figure in FIGURES.items():
            table[name][cell.arm][cell.seed] = figure(rows)
    return table


def comparisons(table: Table) -> tuple[list[Paired], list[Paired]]:
    """The primary family (FedPFN against FedAvg and the control on mean R) and the secondary ones."""
    pairs = (("fedpfn", "fedavg"), ("fedpfn", "fedpfn-client"))
    primary = [paired(f"FedPFN − {base}", "primary", table["median R"][a], table["median R"][base]) for a, base in pairs]
    secondary = []
    for name, by_arm in table.items():
        more = (*pairs, ("fedpfn-fixed", "fedpfn"), ("fedpfn-client", "fedavg"))
        for arm, base in more if name != "median R" else more[2:]:
            secondary.append(paired(f"{name}: {arm} − {base}", name, by_arm[arm], by_arm[base]))
    adjust(primary)
    adjust(secondary)
    return primary, secondary


def table_lines(rows: list[Paired], scale_of: Callable[[Paired], tuple[float, str]]) -> list[str]:
    lines = markup.table(["comparison", "mean", "95 % CI", "p", "sign test p", "p Holm", "seeds higher", "verdict"])
    for p in rows:
        scale, unit = scale_of(p)
        ci = "n/a" if p.low is None or p.high is None else f"[{p.low:+.3f}, {p.high:+.3f}]"
        sign = sign_test(p.diffs)
        lines.append(
            f"| {p.label} | {p.mean:+.3f} | {ci} | {'n/a' if p.p_value is None else f'{p.p_value:.3g}'} "
            f"| {'n/a' if sign is None else f'{sign:.3g}'} | {'n/a' if p.p_holm is None else f'{p.p_holm:.3g}'} "
            f"| {p.wins} of {len(p.diffs)} | {verdict_cell(p, scale, unit)} |"
        )
    return [*lines, "", VERDICT_KEY]  # what the verdict cells' words mean, once under the table


def figure_panels(primary: list[Paired], secondary: list[Paired]) -> dict[str, list[PairedSeries]]:
    """Every comparison of median R, the run's primary figure: the primary family, then its secondary ones."""
    ours = [p for p in secondary if p.metric == "median R"]
    return {"primary family: median R": [series_of(p, 1.0) for p in primary],
            "secondary (exploratory): median R": [series_of(p, 1.0)._replace(label=p.label.split(": ", 1)[1]) for p in ours]}  # fmt: skip


def figure(spec: Spec, primary: list[Paired], secondary: list[Paired]) -> list[str]:
    """The median R figure, written beside the stored file, and the sentence that says what it draws."""
    title = f"{spec.title}: median R, each arm − its baseline on the same seed"
    line = reading_figure(spec, "median-R", figure_panels(primary, secondary), title, "in R", "arm − baseline")
    flags = {name: tokens[-1] for name, tokens in groups(spec.shared)}
    measured = int(flags["rounds"]) // int(flags["alignment_every"])
    return [line, "", f"Each dot is one seed's difference in the run's median R (the retained fraction's median over its "
            f"{measured} measurements, on each client's held-out Fashion-MNIST data), as stored; the diamond is the mean "
            f"over the {len(spec.seeds)} seeds and the bar its 95 % interval (Student's t), as in the tables, whose "
            "verdicts (the Holm-adjusted p) say which differences are resolved."]  # fmt: skip


def results(spec: Spec, table: Table, steps: float) -> str:
    primary, secondary = comparisons(table)
    means = markup.table(["arm", *table], [[arm, *(f"{_mean(list(table[f][arm].values())):+.3f}" for f in table)] for arm in spec.arms])
    unit = lambda p: (1.0, "nats") if "P" in p.label else ((1.0, "points") if "accuracy" in p.label or "%" in p.label else (1.0, "in R"))  # noqa: E731
    return "\n".join([
        "## Results", "", f"Written by `fedpfn study page {spec.path} --trust-code` from {len(spec.arms) * len(spec.seeds)} runs "
        f"under {spec.runs}/. Means over seeds:", "", *means, "",
        f"### Primary family: median R (Holm across the {sum(p.p_value is not None for p in primary)} tested)", "",
        *table_lines(primary, lambda p: (1.0, "in R")), "", *figure(spec, primary, secondary), "",
        *reading(spec, table, primary, steps), "",
        "### Secondary (exploratory; Holm within each figure)", "",
        *table_lines(secondary, unit), "",
    ])  # fmt: skip


def steps_per_round(spec: Spec) -> float:
    """Local steps a client took a round, over every client of every run: ceil(n / batch) x epochs."""
    flags = {name: tokens[-1] for name, tokens in groups(spec.shared)}
    batch, epochs = int(flags["batch_size"]), int(flags["local_epochs"])
    cells = sorted(main_cells(spec), key=lambda c: (list(spec.arms).index(c.arm), c.seed))
    sizes = [row["num_examples"] for cell in cells for row in read_jsonl(cell.folder / CLIENTS)]
    return _mean([math.ceil(n / batch) * epochs for n in sizes])


def gate_steps(spec: Spec) -> int:
    """The steps each of the gate's two models took in its regime (cells.json beside the stored file)."""
    assert spec.page is not None
    try:  # beside the stored file, whose folder page.write checked: read by the checked reader
        config = read_json(spec.page.stored.parent / "cells.json")[GATE_REGIME]["config"]
    except (OSError, DamagedFile) as err:
        raise spec.refuse(f"page.stored: the gate's cells.json beside it cannot be read ({err})") from None
    trained = config["train_subset"] - math.ceil(config["held_out"] * config["train_subset"])
    return math.ceil(trained / config["batch_size"]) * config["epochs"]


def reading(spec: Spec, table: Table, primary: list[Paired], steps: float) -> list[str]:
    """What the runs say, computed: whether matching found misalignment, and what the primary excludes."""
    p_means = [v for arm in spec.arms for v in table["mean P (nats)"][arm].values()]
    moved = [v for arm in spec.arms for v in table["units moved (%)"][arm].values()]
    lines = ["**Reading.** Between a round's clients, weight matching found almost no permutation: "
             f"the runs' mean P lies in [{min(p_means):+.4f}, {max(p_means):+.4f}] nats and matching moved "
             f"{min(moved):.2f} to {max(moved):.2f} % of the units on average, in every arm. The gate's two "
             f"models ({GATE_REGIME}, docs/alignment.md) drifted apart over {gate_steps(spec)} steps each on the "
             f"same data; a client here took {steps:.0f} steps a round on average from the global "
             "model, so the misalignment the gate found did not arise within a round, and what averaging cost "
             "the clients here was not permutation."]  # fmt: skip
    for p in primary:
        if p.low is not None and p.high is not None:
            lines.append(f"{p.label} on median R: {p.mean:+.3f}, 95 % CI [{p.low:+.3f}, {p.high:+.3f}]: "
                         f"{'resolved' if decided(p) else 'not resolved'}, "
                         f"the interval excludes a difference above {p.high:+.3f} and below {p.low:+.3f}.")  # fmt: skip
    return [" ".join(lines)]


def write_stored(spec: Spec) -> None:
    """From the finished cells: the figures and the clients' steps a round, in the stored file."""
    assert spec.page is not None
    kept = {"figures": figures(spec), "steps_per_round": steps_per_round(spec)}
    spec.page.stored.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(spec.page.stored, (json.dumps(kept, indent=1) + "\n").encode())


def stored_table(spec: Spec) -> tuple[Table, float]:
    """The stored figures (figure -> arm -> seed -> value) and the clients' steps a round."""
    kept = spec.stored_results()
    table = {f: {arm: {int(k): v for k, v in seeds.items()} for arm, seeds in by_arm.items()}
             for f, by_arm in kept["figures"].items()}  # fmt: skip
    return table, kept["steps_per_round"]


def section(spec: Spec) -> list[str]:
    """The page's results from the stored file alone."""
    return results(spec, *stored_table(spec)).split("\n")[:-1]


def in_short(spec: Spec) -> list[str]:
    """The page's question and answer in short, for its top (`<!-- study: federated-summary -->`): the
    primary family a line each, as its table below reads it, and the P the runs measured."""
    table, _ = stored_table(spec)
    primary, _ = comparisons(table)
    p_means = [v for arm in spec.arms for v in table["mean P (nats)"][arm].values()]
    lines = ["**In short.** Does FedPFN keep a larger share of the clients' local gains through aggregation (the "
             "run's median retained fraction R) than FedAvg and than the per-client-mask control? The pre-registered "
             f"primary family over {len(spec.seeds)} seeds, Holm across the {sum(p.p_value is not None for p in primary)} "
             "tested (the [results](#results) below give the detail):", ""]  # fmt: skip
    for p in primary:
        ci = "" if p.low is None or p.high is None else f" [{p.low:+.3f}, {p.high:+.3f}]"
        lines.append(f"- {p.label}: {p.mean:+.3f} in R{ci}: {verdict_cell(p, 1.0, 'in R').split(';')[0]}")
    return [*lines, "", f"Between a round's clients matching found almost no permutation: the runs' mean P lies in "
            f"[{min(p_means):+.4f}, {max(p_means):+.4f}] nats in every arm."]  # fmt: skip


READINGS = Readings(keep=write_stored, sections={"alignment_federated": section, "federated-summary": in_short})
