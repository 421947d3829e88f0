"""The alignment pilot's page (its `page.readings`, READINGS below; studies/alignment_pilot/alignment_pilot.toml): its blocks
read from the runs, the rule applied, the results written below the template's marker.

The grid is the study's: its axes `lr` and `regime` (named flag sets: the clients and the local
epochs), its arms `plain` and `anchored`, its seeds; its part `controls` holds each block's
diff-init control (`python -m fedpfn.experiments.lmc`, the block's seeds in one lmc.json). `write_stored`
reads the runs into one JSON-able dict, kept as the page's stored file (docs/alignment/pilot.json);
`section` renders the results and the rule's figure (docs/alignment/pilot-P.png) from that file
alone, so `page --stored` writes the same bytes. The rule is docs/alignment_pilot.md's: a
(regime, lr) block qualifies when P(plain) in round 1 and at the last round are above 0 with
intervals excluding 0, the diff-init control likewise, and plain's own accuracy is not resolved
below anchored's in either round.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from fedpfn.analysis.markup import table
from fedpfn.analysis.plots import PairedSeries
from fedpfn.analysis.render import series_of
from fedpfn.analysis.stats import Paired, paired
from fedpfn.core.files import CLIENTS, CONFIG, METRICS, PROVENANCE, atomic_write_bytes, is_finished, read_json, read_jsonl
from fedpfn.study.cells import groups, main_cells
from fedpfn.study.figures import reading_figure
from fedpfn.study.readings import Readings
from fedpfn.study.runner import TIMES
from fedpfn.study.spec import Spec

ARMS = ("plain", "anchored")  # the rule's arms, by name
AXES = ("lr", "regime")  # a block: a learning rate and a regime (named flags: clients, local epochs)
CONTROLS = "controls"  # the part holding each block's diff-init control
LINEAR_WITHIN = 0.01  # nats: the figure's axis is linear within it (round 5's P near 0 beside the control's 1)
EARLIER = "rounds10"  # the slow first cells' timing, kept under the runs folder (the page counts it)


def flag(spec: Spec, flags: tuple[str, ...], name: str) -> str:
    """A flag's value among flags as typed (`--num-clients 10`: '10'); refused when not given once."""
    found = [tokens for key, tokens in groups(flags) if key == name]
    if len(found) != 1 or len(found[0]) != 2:
        raise spec.refuse(f"the pilot reads --{name.replace('_', '-')} from {' '.join(flags)!r}; give it once")
    return found[0][1]


def check(spec: Spec) -> None:
    """The grid the pilot's rule reads, or one line naming what the study file lacks."""
    part = spec.parts.get(CONTROLS)
    if tuple(spec.arms) != ARMS or sorted(spec.axes) != sorted(AXES) or "regime" not in spec.axis_sets:
        raise spec.refuse(f"page.readings: the pilot's readings read arms {' and '.join(ARMS)} over axes lr and regime (a table "
                          "of named flag sets); declare them")  # fmt: skip
    if part is None or not part.joint or part.axes != spec.axes or len(part.arms) != 1:
        raise spec.refuse(f"page.readings: the pilot's readings read one control a block: [parts.{CONTROLS}] with command = \"lmc\", "
                          "one arm, the study's axes and a cell pattern without {seed}")  # fmt: skip


def regime_of(spec: Spec, regime: str) -> tuple[int, int]:
    """A regime's clients and local epochs, as its flags give them."""
    flags = spec.axis_sets["regime"][regime]
    return int(flag(spec, flags, "num_clients")), int(flag(spec, flags, "local_epochs"))


def grid(spec: Spec) -> dict[str, dict[str, Any]]:
    """Each block (`r114/lr0.1`), in the study's order: its regime, lr, run folders by arm and seed, control folder."""
    check(spec)
    blocks: dict[str, dict[str, Any]] = {}
    for cell in [*main_cells(spec), *main_cells(spec.parts[CONTROLS])]:
        point = dict(cell.point)
        block = blocks.setdefault(f"{point['regime']}/lr{point['lr']}", {"regime": point["regime"], "lr": point["lr"],
                                                                          "runs": {arm: {} for arm in ARMS}})  # fmt: skip
        if cell.arm in ARMS:
            block["runs"][cell.arm][cell.seed] = cell.folder
        else:
            block["control"] = cell.folder
    return blocks


def run_figures(run: Path) -> dict[str, float]:
    """One finished run's figures in round 1 and its last round."""
    rows = read_jsonl(run / METRICS)
    found: dict[str, float] = {}
    for when, row in (("r1", rows[0]), ("last", rows[-1])):
        found[f"P_{when}"] = row["align_permutation_loss"]
        found[f"moved_{when}"] = row["align_moved_fraction"]
        found[f"acc_{when}"] = row["align_mean_client_acc"]
        for matcher in ("full", "changes"):
            clients = row.get(f"align_client_permutation_loss_{matcher}") or [math.nan]
            found[f"clientP_{matcher}_{when}"] = sum(clients) / len(clients)
        found[f"client_seconds_{when}"] = row.get("align_client_seconds", math.nan)
    found["test_acc_last"] = rows[-1]["test_accuracy"]
    clients = read_jsonl(run / CLIENTS)
    for when, number in (("r1", 1), ("last", len(rows))):
        own = [c["local_accuracy_after"] for c in clients if c["round"] == number]
        found[f"own_{when}"] = sum(own) / len(own)  # each client on its own held-out data, after training
    return found


def begun_figures(run: Path) -> dict[str, float]:
    """A run not finished: the rounds it measured so far and its round-1 figures."""
    rows = read_jsonl(run / METRICS)
    clients = rows[0].get("align_client_permutation_loss_changes") or [math.nan] if rows else []
    return {"rounds": len(rows)} if not rows else {
        "rounds": len(rows), "P_r1": rows[0]["align_permutation_loss"], "clientP_changes_r1": sum(clients) / len(clients),
        "client_seconds_r1": rows[0].get("align_client_seconds", math.nan)}  # fmt: skip


def steps(run: Path, epochs: int, batch: int) -> float:
    """Local steps a client took a round in this run, over all its clients' rows."""
    sizes = [row["num_examples"] for row in read_jsonl(run / CLIENTS)]
    return sum(math.ceil(n / batch) * epochs for n in sizes) / len(sizes)


def block_figures(spec: Spec, block: dict[str, Any]) -> dict[str, Any]:
    """One block's finished runs, runs begun, control (diff-init's P by seed) and local steps a round."""
    folders = block["runs"]
    runs = {arm: {str(s): run_figures(f) for s, f in folders[arm].items() if is_finished(f)} for arm in ARMS}
    begun = {arm: {str(s): begun_figures(f) for s, f in folders[arm].items()
                   if str(s) not in runs[arm] and (f / METRICS).exists()} for arm in ARMS}  # fmt: skip
    control = block["control"] / "lmc.json"
    diff = read_json(control)["settings"]["diff-init"]["seeds"] if control.exists() else []
    done = [folders["plain"][int(s)] for s in runs["plain"]]
    epochs, batch = regime_of(spec, block["regime"])[1], int(flag(spec, spec.shared, "batch_size"))
    return {"regime": block["regime"], "lr": block["lr"], "runs": runs, "begun": begun,
            "control": {str(r["seed"]): r["permutation_loss"] for r in diff},
            "steps": sum(steps(run, epochs, batch) for run in done) / len(done) if done else None}  # fmt: skip


def collect(spec: Spec) -> dict[str, Any]:
    """Every block's finished runs and control, and the CPU seconds the cells took (the runner's TIMES)."""
    blocks = grid(spec)
    read = lambda path: read_jsonl(path) if path.exists() else []  # noqa: E731
    cpu, earlier = read(spec.runs / TIMES), read(spec.runs / EARLIER / TIMES)
    regimes = {f.relative_to(spec.runs).as_posix(): b["regime"] for b in blocks.values() for arm in ARMS
               for f in b["runs"][arm].values()}  # fmt: skip
    by_regime: dict[str, list[float]] = {}
    for cell in cpu:
        if cell["cell"] in regimes:  # a federated run's (a control's is not a run)
            by_regime.setdefault(regimes[cell["cell"]], []).append(cell["cpu_s"])
    cpu += earlier
    made_on = {cell: read_json(spec.runs / cell / CONFIG).get(PROVENANCE) for cell in regimes
               if (spec.runs / cell / CONFIG).is_file()}  # each run's code, libraries and machine  # fmt: skip
    return {"blocks": {name: block_figures(spec, b) for name, b in blocks.items()},
            "cpu_s": round(sum(c["cpu_s"] for c in cpu), 1), "cells_timed": len(cpu),
            "cpu_s_per_run": {r: round(sum(v) / len(v), 1) for r, v in by_regime.items()},
            "provenance": made_on}  # fmt: skip


def compared(values: dict[str, float], base: dict[str, float] | None = None, label: str = "") -> Paired:
    """The seeds' values paired against `base` (else against 0): what a figure and its interval read."""
    ours = {int(s): v for s, v in values.items()}
    theirs = {int(s): base[s] for s in values} if base is not None else {s: 0.0 for s in ours}
    return paired(label, "", ours, theirs)


def interval(values: dict[str, float], base: dict[str, float] | None = None) -> tuple[float, float, float]:
    """Mean and 95 % interval over seeds (paired against `base`, else against 0)."""
    p = compared(values, base)
    return p.mean, p.mean if p.low is None else p.low, p.mean if p.high is None else p.high


def text(figure: tuple[float, float, float], scale: float = 1.0, digits: int = 3) -> str:
    mean, low, high = (scale * v for v in figure)
    return f"{mean:+.{digits}f} [{low:+.{digits}f}, {high:+.{digits}f}]"


def judge(block: dict[str, Any]) -> tuple[dict[str, tuple[float, float, float]], list[str]]:
    """The block's intervals and the rule's failed conditions (empty: it qualifies)."""
    plain, anchored = block["runs"]["plain"], block["runs"]["anchored"]
    figures = {when: interval({s: f[f"P_{when}"] for s, f in plain.items()}) for when in ("r1", "last")}
    figures["control"] = interval(block["control"])
    for when in ("r1", "last"):
        figures[f"acc_{when}"] = interval({s: f[f"acc_{when}"] for s, f in plain.items()},
                                          {s: f[f"acc_{when}"] for s, f in anchored.items()})  # fmt: skip
    failed = [name for name, key in (("P(plain) in round 1", "r1"), ("P(plain) at the last round", "last"),
                                     ("the diff-init control", "control")) if not figures[key][1] > 0]  # fmt: skip
    failed += [f"plain's own accuracy below anchored's ({when})" for when in ("r1", "last")
               if figures[f"acc_{when}"][2] < 0]  # fmt: skip
    return figures, failed


def finished(block: dict[str, Any], seeds: int) -> bool:
    """Whether every run of the block (`seeds` a arm) and its control finished."""
    return all(len(block["runs"][arm]) == seeds for arm in ARMS) and len(block["control"]) == seeds


def row(name: str, block: dict[str, Any]) -> tuple[str, list[str]]:
    figures, failed = judge(block)
    anchored = block["runs"]["anchored"]
    p_anchored = {w: interval({s: f[f"P_{w}"] for s, f in anchored.items()}) for w in ("r1", "last")}
    clients = {m: [interval({s: f[f"clientP_{m}_{w}"] for s, f in block["runs"]["plain"].items()}) for w in ("r1", "last")]
               for m in ("full", "changes")}  # fmt: skip
    cells = [name, f"{block['steps']:.0f}", text(figures["r1"], digits=4), text(figures["last"], digits=4),
             text(figures["control"]), text(p_anchored["r1"], digits=4), text(p_anchored["last"], digits=4),
             *(text(c, digits=4) for m in ("full", "changes") for c in clients[m]),
             text(figures["acc_r1"], 100, 2), text(figures["acc_last"], 100, 2),
             "yes" if not failed else "no: " + "; ".join(failed)]  # fmt: skip
    return "| " + " | ".join(cells) + " |", failed


def own(block: dict[str, Any], when: str) -> tuple[float, float, float]:
    plain, anchored = block["runs"]["plain"], block["runs"]["anchored"]
    return interval({s: f[f"own_{when}"] for s, f in plain.items()}, {s: f[f"own_{when}"] for s, f in anchored.items()})


def chosen(data: dict[str, Any], seeds: int) -> str | None:
    """The rule's choice among the finished blocks: the fewest local steps a round that qualifies,
    then the highest lower bound of round-1 P(plain); None when no finished block qualifies."""
    good = [(b["steps"], -judge(b)[0]["r1"][1], name) for name, b in data["blocks"].items()
            if finished(b, seeds) and not judge(b)[1]]  # fmt: skip
    return min(good)[2] if good else None


def next_try(everywhere: list[str], seeds: int) -> str:
    """What the conditions failed in every block suggest; more seeds only where round 1 failed too."""
    if "P(plain) at the last round" not in everywhere:
        return ""
    more_seeds = f"more seeds would resolve round 1 ({seeds} cannot), and " if "P(plain) in round 1" in everywhere else ""
    return (" What to try next: P(plain) at the last round failing wherever it was read says that a round's clients, "
            "starting from a trained aggregate, did not misalign at any local steps or learning rate tried, "
            f"so what there is to remove lives in round 1; {more_seeds}a federated study can read anchors' effect "
            "only as an exploratory one.")  # fmt: skip


def pick(spec: Spec, data: dict[str, Any]) -> str:
    """The rule's choice among the finished blocks, in words, with the cheaper blocks not run."""
    done = {name: b for name, b in data["blocks"].items() if finished(b, len(spec.seeds))}
    name = chosen(data, len(spec.seeds))
    if not done:
        return ("**No block finished**, so the rule has picked nothing yet and the main study waits for it: "
                f"`fedpfn study run {spec.path}` goes on from where the runs stopped.")  # fmt: skip
    if name is None:
        failures = [judge(b)[1] for b in done.values()]
        everywhere = [c for c in failures[0] if all(c in f for f in failures)]
        one = len(done) == 1
        return (("**No regime qualified**: the block that ran did not; the table says which condition failed. "
                 "The main study should not be run in it." if one else
                 f"**No regime qualified** among the {len(done)} blocks that ran; the table says which condition "
                 "failed where. The main study should not be run in any of them.")
                + (f" Failed {'there' if one else 'in every block'}: {'; '.join(everywhere)}." if everywhere else "")
                + next_try(everywhere, len(spec.seeds)))  # fmt: skip
    block = data["blocks"][name]
    clients, epochs = regime_of(spec, block["regime"])
    per_client = lambda regime: regime_of(spec, regime)[1] / regime_of(spec, regime)[0]  # noqa: E731  (steps go as epochs / clients)
    cheaper = [n for n, b in data["blocks"].items() if n not in done and per_client(b["regime"]) < epochs / clients]
    note = f" Cheaper blocks not run: {', '.join(cheaper)}; the pick bounds the steps needed from above." if cheaper else ""
    return (f"**The pick: {name}** ({clients} clients, {epochs} local epochs, about {block['steps']:.0f} local "
            f"steps a round, lr {block['lr']}): the cheapest qualifying block, and the main study's regime "
            f"(`--num-clients {clients} --local-epochs {epochs} --lr {block['lr']}` with the fixed settings above).{note}")


def shown_cell(value: float | None, run: dict[str, Any] | None, rounds: str) -> str:
    """A figure, or where its run stands: not run, or the round a run still going had reached."""
    if value is not None:
        return f"{value:+.4f}"
    return f"at round {run['rounds']} of {rounds}" if run else "not run"


def unfinished(spec: Spec, data: dict[str, Any]) -> list[str]:
    """The finished runs and controls of blocks not finished, seed by seed: read by no rule, shown as they are."""
    lines = table(["block", "seed", "P(plain) round 1", "round 5", "P(anchored) round 1", "round 5",
                   "client P(plain), changes, round 1", "round 5", "P(diff-init)"])
    for name, block in data["blocks"].items():
        if finished(block, len(spec.seeds)):
            continue
        for seed in map(str, spec.seeds):
            plain, anchored = (block["runs"][a].get(seed) or block["begun"][a].get(seed, {})
                               for a in ("plain", "anchored"))  # fmt: skip
            figures = [plain.get("P_r1"), plain.get("P_last"), anchored.get("P_r1"), anchored.get("P_last"),
                       plain.get("clientP_changes_r1"), plain.get("clientP_changes_last"), block["control"].get(seed)]
            if any(f is not None for f in figures):
                owners = [plain, plain, anchored, anchored, plain, plain, None]
                shown = [shown_cell(f, run, flag(spec, spec.shared, "rounds")) for f, run in zip(figures, owners)]
                lines.append(f"| {name} | {seed} | " + " | ".join(shown) + " |")
    if len(lines) == 2:
        return []
    return ["Runs of the blocks not finished, each seed as it is (no interval, and no part of the rule; a run stopped or "
            "still going shows the round it had reached):", "",
            *lines, ""]


def figure_panels(spec: Spec, data: dict[str, Any]) -> dict[str, list[PairedSeries]]:
    """The rule's three figures against 0 (conditions 1 to 3), each finished block a row, every
    seed's value as stored: P(plain) in round 1 and at the last round, and the diff-init control."""
    panels: dict[str, list[PairedSeries]] = {"P(plain), round 1": [], f"P(plain), round {flag(spec, spec.shared, 'rounds')}": [],
                                             "P(diff-init), the positive control": []}  # fmt: skip
    for name, block in data["blocks"].items():
        if finished(block, len(spec.seeds)):
            plain, label = block["runs"]["plain"], f"{name} ({block['steps']:.0f} steps)"
            found = ({s: f["P_r1"] for s, f in plain.items()}, {s: f["P_last"] for s, f in plain.items()}, block["control"])
            for title, values in zip(panels, found):
                panels[title].append(series_of(compared(values, label=label), 1.0))
    return panels


def figure(spec: Spec, data: dict[str, Any]) -> list[str]:
    """The rule's figure, written beside the stored file, and the sentence that says what it draws."""
    title = "The pilot's rule: P against 0 in each finished block"
    line = reading_figure(spec, "P", figure_panels(spec, data), title, "nats", "P", linear_within=LINEAR_WITHIN,
                          mean_name="mean over seeds")  # fmt: skip
    return [line, "", "The figure draws what the rule's first three conditions read, from the stored figures: each dot is "
            "one seed's P as the table reads it (nats, weight matching on full weights, on the union of the pair's "
            "held-out Fashion-MNIST data), the diamond the mean over seeds, the bar its 95 % interval (Student's t); a block qualifies on "
            "these only where all three bars lie right of 0. Rows are the finished blocks, with their local steps a "
            f"round; the axis is symmetric-log, linear within ±{LINEAR_WITHIN:g} nats, so that P near 0 stays "
            "readable beside the control's.", ""]  # fmt: skip


def results(spec: Spec, data: dict[str, Any]) -> str:
    """The page's results from the stored figures: the rule's table, the pick, and what the cells cost."""
    assert spec.page is not None
    seeds = len(spec.seeds)
    head = table(["block", "local steps a round", "P(plain) round 1", "P(plain) round 5", "P(diff-init)",
                  "P(anchored) round 1", "P(anchored) round 5", "client P(plain), full, round 1", "round 5",
                  "client P(plain), changes, round 1", "round 5", "plain − anchored own accuracy, round 1 (points)",
                  "round 5 (points)", "qualifies"])  # fmt: skip
    rows = [row(name, b)[0] for name, b in data["blocks"].items() if finished(b, seeds)]
    started = lambda b: any(b["runs"].values()) or any(b["begun"].values()) or b["control"]  # noqa: E731
    partial = [f"{n} ({sum(len(b['runs'][a]) for a in ARMS)} of {len(ARMS) * seeds} runs finished, "
               f"{sum(len(b['begun'][a]) for a in ARMS)} begun, control {'done' if b['control'] else 'not run'})"
               for n, b in data["blocks"].items() if not finished(b, seeds) and started(b)]  # fmt: skip
    untouched = [n for n, b in data["blocks"].items() if not started(b)]
    seconds = [f[k] for b in data["blocks"].values() for kind in ("runs", "begun") for arm in b[kind].values()
               for f in arm.values() for k in ("client_seconds_r1", "client_seconds_last") if k in f]  # fmt: skip
    lines = [
        "## Results", "",
        f"Written by `fedpfn study page {spec.path} --trust-code` from the runs under {spec.runs}/ "
        f"({spec.page.stored} keeps their figures). Each figure: the mean over seeds 0-2 and its 95 % "
        "interval (Student's t, fedpfn.analysis.stats.paired against 0, or plain against anchored paired by "
        "seed). P in nats: between the round's clients, weight matching on full weights, the mean over the "
        "round's 10 pairs (the rule's figure); client P, each client against the round's aggregate under "
        "the full and the changes matcher, the mean over the round's 5 clients (beside the rule, not in it). "
        "Own accuracy (the rule's) is each client model's on the union of the round's held-out data.", "",
        *((*head, *rows, "", *figure(spec, data)) if rows else ()),
        pick(spec, data), "",
        "Beside the rule: each client's accuracy on its own held-out data after its local training "
        "(clients.jsonl), plain − anchored in points, round 1 and round 5: "
        + ("; ".join(f"{n} {text(own(b, 'r1'), 100, 2)} and {text(own(b, 'last'), 100, 2)}"
                     for n, b in data["blocks"].items() if finished(b, seeds)) or "no block finished") + ".", "",
        f"Not finished: {', '.join(partial) or 'none'}. Not run: {', '.join(untouched) or 'none'}.", "",
        *unfinished(spec, data),
        f"**CPU time.** The timed cells took {data['cpu_s']:.0f} CPU-seconds ({data['cpu_s'] / 3600:.2f} "
        f"CPU-hours) over {data['cells_timed']} cells, counting any slow first cells kept under {EARLIER}/; cells "
        "stopped before they finished, or still going, are not counted. Measuring every client against the aggregate took "
        + (f"{sum(seconds) / len(seconds):.1f} s of wall time a measured round on average, on the loaded machine."
           if seconds else "no time: no run recorded it.")
        + (" CPU-seconds a finished run took, by regime: "
           + ", ".join(f"{r} {v:.0f}" for r, v in data["cpu_s_per_run"].items()) + "." if data["cpu_s_per_run"] else ""),
    ]  # fmt: skip
    return "\n".join(lines) + "\n"


def write_stored(spec: Spec) -> None:
    """The blocks' figures from the runs, the finished blocks and the rule's pick, in the page's stored file."""
    assert spec.page is not None
    data = collect(spec)
    if not any(b["runs"][arm] or b["begun"][arm] or b["control"] for b in data["blocks"].values() for arm in ARMS):
        raise spec.refuse(f"no run under {spec.runs} has begun: fedpfn study run {spec.path} first (page --stored "
                          f"writes the page from {spec.page.stored}); nothing written")  # fmt: skip
    data["finished"] = [name for name, block in data["blocks"].items() if finished(block, len(spec.seeds))]
    data["pick"] = chosen(data, len(spec.seeds))  # what the main study and the findings read
    spec.page.stored.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(spec.page.stored, (json.dumps(data, indent=1) + "\n").encode())  # in the blocks' order


def section(spec: Spec) -> list[str]:
    """The results below the template's marker, from the stored file alone."""
    check(spec)
    return results(spec, spec.stored_results()).split("\n")[:-1]


def in_short(spec: Spec) -> list[str]:
    """The page's answer in short, for its top (`<!-- study: pilot-summary -->`): the rule's pick and each
    finished block's P(plain) in rounds 1 and 5 with its interval and whether it qualifies, as the table reads them."""
    check(spec)
    data, seeds = spec.stored_results(), len(spec.seeds)
    done, name = {n: b for n, b in data["blocks"].items() if finished(b, seeds)}, chosen(data, seeds)
    answer = f"**the pick is {name}**" if name else (
        f"**no regime qualified** among the {len(done)} finished block{'s' * (len(done) > 1)}" if done else
        "no block has finished yet")
    lines = [f"**In short.** Where do a federated round's clients misalign? By the rule below, {answer} (the "
             "[results](#results) give the detail). P(plain) between a round's plain clients in nats, the mean and "
             f"95 % interval over {seeds} seeds in round 1 and round 5, and whether the block qualifies:", ""]  # fmt: skip
    for n, b in done.items():
        figures, failed = judge(b)
        lines.append(f"- {n} ({b['steps']:.0f} local steps a round): {text(figures['r1'], digits=4)} and "
                     f"{text(figures['last'], digits=4)}; qualifies: {'yes' if not failed else 'no: ' + '; '.join(failed)}")
    return lines


READINGS = Readings(keep=write_stored, sections={"pilot": section, "pilot-summary": in_short}, partial=True)
