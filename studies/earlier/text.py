"""The earlier study's page text (docs/results_earlier.md), from its stored data and reports alone.

Every comparison is a `fedpfn.analysis.report` (its Markdown under the section, its JSON behind the
sentences); each comparison is tested again from its per-seed differences as every page of the
project tests one (the exact test up to 5 seeds, Holm within its family, `verdict`'s words). studies.earlier.readings keeps the data this module reads.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fedpfn.analysis.inference import Paired, adjust_together, retested
from fedpfn.analysis.markup import table
from fedpfn.analysis.paired_text import p_number, p_text, test_note, verdict
from fedpfn.analysis.stats import ACCURACY_SPAN
from fedpfn.study.spec import Spec

SERVER_ALPHA = "0.1"  # the skew of every follow-up comparison
SERVER_GRID = {"fedavgm": ("0.3", "1.0"), "fedadam": ("0.003", "0.01", "0.03")}  # server learning rates tried
RATIOS = ("0.2", "0.6")  # FedPNU's anchor ratios besides its default 0.4
VARIANTS = ("plain", "round-keep", "round-reset", "fixed")  # the anchors under a server
CLAIMS = ("higher than", "lower than", "not resolved from")
SPANS = {"lastk": ACCURACY_SPAN, "final": ACCURACY_SPAN}  # the largest difference of an accuracy
GRID_HEADING = "Learning rates, chosen on a validation split"
ANCHORS_CAVEAT = ("an exploratory check, not an answer: the MLP, 3 seeds, and the server learning rates issue 11 "
                  "fixed (FedAvgM 1.0, FedAdam 0.01) rather than rates tuned per arm, so it is left out of *In short*.")  # fmt: skip


@dataclass(frozen=True)
class Comparison:
    """One section of the page: a report over `folders` (under the study's runs) against `baseline`."""

    name: str
    folders: tuple[str, ...]
    baseline: str
    heading: str
    intro: str


def comparisons(spec: Spec, ratio_folders: list[str]) -> list[Comparison]:
    """Every comparison of the study, in page order (`ratio_folders`: FedPNU's, by anchor ratio)."""
    a, arms = SERVER_ALPHA, tuple(spec.arms)
    found = [Comparison(f"main-a{alpha}", tuple(f"main-a{alpha}/{x}" for x in arms), "fedavg",
                        f"FedAvg, FedPFN, FedPNU at Dirichlet {alpha}",
                        "Each algorithm at its chosen learning rate; FedAvg's server.")
             for alpha in spec.axes["alpha"]]  # fmt: skip
    found.append(Comparison("schedule", (f"main-a{a}/fedpfn", f"main-a{a}/fedpfn-fixed"), "fedpfn anchor_schedule=round",
                            f"Anchor schedule (FedPFN, Dirichlet {a})",
                            "`round`: a new mask every round, anchored at the received model; `fixed`: one mask, "
                            "anchored at the initial weights, for the whole run."))  # fmt: skip
    for server in SERVER_GRID:
        found.append(Comparison(f"server-{server}", (f"servers-a{a}/fedavg-{server}", f"servers-a{a}/fedpfn-{server}"),
                                "fedavg", f"FedPFN under {server} (Dirichlet {a})",
                                f"The compatibility claim: {server} alone (the arm `fedavg`: FedAvg clients under "
                                f"{server}) against FedPFN with {server}, same server settings."))  # fmt: skip
    found.append(Comparison("fedpnu-ratios", (f"main-a{a}/fedavg", *ratio_folders), "fedavg",
                            f"FedPNU: upload saved against accuracy (Dirichlet {a})",
                            "FedPNU uploads only the neurons it trained: about 1 - rho of FedAvg's bytes (MB columns)."))  # fmt: skip
    for server in ("fedavgm", "fedadam"):
        found.append(Comparison(f"anchors-{server}", tuple(f"anchors-server/{server}/{v}" for v in VARIANTS), "fedavg",
                                f"Anchored entries under {server}: the variants (MLP, 3 seeds)",
                                f"Issue 11's semantics; the arm `fedavg` is FedAvg clients under {server} without "
                                "anchors. `round` + keep (default): the server optimizer's own step on anchored entries "
                                "stands; `round` + reset: anchored entries written back to their anchor values; "
                                "`fixed`: one mask, the initial weights, all run. Read it as " + ANCHORS_CAVEAT))  # fmt: skip
    return found


def tested(result: dict[str, Any]) -> list[Paired]:
    """A section's comparisons tested again from their per-seed differences: the exact sign-flip test
    up to 5 seeds (its floor named), Holm within each metric of the section, as its report does."""
    return retested([p for p in result["paired"] if p["low"] is not None], SPANS)


def claim(p: Paired) -> str:
    """What a comparison supports, after its family's Holm adjustment: one of CLAIMS."""
    said = verdict(p)
    return CLAIMS[0] if said == "higher" else CLAIMS[1] if said == "lower" else CLAIMS[2]


def gap_text(p: Paired) -> str:
    """The difference in points, its 95 % t interval, its p and Holm p, and the seeds it was higher on."""
    return (f"{100 * p.mean:+.2f} points (95 % CI {100 * p.low:+.2f} to {100 * p.high:+.2f}; p {p_text(p, '.2g')}, "
            f"p Holm {p_number(p.p_holm, '.2g')}; higher on {p.wins} of {len(p.diffs)} seeds)")  # fmt: skip


def verdicts(result: dict[str, Any], final: bool = True) -> list[str]:
    """One plain sentence per arm and metric (without `final`: the last-rounds mean only)."""
    lines = []
    for p in tested(result):
        if p.metric == "final" and not final:
            continue
        what = "final accuracy" if p.metric == "final" else f"accuracy over the {result['window']}"
        lines.append(f"- {p.label}: {what} against {result['baseline']}: {gap_text(p)}; {verdict(p)}.")
    return lines


def arm_runs(result: dict[str, Any], label: str) -> tuple[str, ...]:
    """The run folders behind one arm of a comparison: two sections may compare the very same runs."""
    return tuple(sorted(run["path"] for arm in result["arms"] if arm["arm"] == label for run in arm["runs"]))


def in_short(results: list[tuple[str, dict[str, Any]]], seeds: int = 5) -> list[str]:
    """The page's conclusion: every arm compared over `seeds` or more, tested again as one Holm family
    (counted as computed) and grouped by what it supports; two sections comparing the very same runs
    against the same baseline runs make one entry, tested once."""
    if not results:
        return []  # nothing finished: the page lists every comparison as not yet run
    entries: dict[tuple, tuple[Paired, list[str]]] = {}  # runs compared -> (comparison, where)
    for heading, result in results:
        for p in tested(result):
            if p.metric == "final" or len(p.diffs) < seeds:
                continue
            runs = arm_runs(result, p.label)
            same = (runs, arm_runs(result, result["baseline"])) if runs else (heading, p.label)
            if same in entries:
                entries[same][1].append(f"*{heading}* as {p.label}")
            else:
                entries[same] = (p, [f"{p.label} in *{heading}*"])
    family = adjust_together(p for p, _ in entries.values())
    groups: dict[str, list[str]] = {c: [] for c in CLAIMS}
    for p, where in entries.values():
        groups[claim(p)].append(f"{' and '.join(where)} ({100 * p.mean:+.2f} [{100 * p.low:+.2f}, {100 * p.high:+.2f}], "
                                f"p Holm {p_number(p.p_holm, '.2g')})")  # fmt: skip
    note = test_note([p for p, _ in entries.values()]) if entries else ""
    return [f"**In short.** Does training-time alignment help federated learning here? Every comparison with {seeds} "
            "seeds, by what it supports (accuracy over the last rounds: the paired difference from its section's "
            f"baseline in points and its 95 % interval; Holm over the {family} comparisons listed; the "
            f"[answers](#answers) below give them section by section. {note}):", "",
            *(f"- {c} the baseline: {'; '.join(found) or 'none'}." for c, found in groups.items()), ""]  # fmt: skip


def report_body(markdown: str) -> list[str]:
    """A report's Markdown under a section of the page: its title as the setting, no repeated command."""
    lines = []
    for line in markdown.strip().splitlines():
        if line.startswith("## "):
            lines.append(f"Setting: {line[3:]}.")
        elif not line.startswith("Command:"):
            lines.append(line)
    return lines


def section(result: dict[str, Any], kept: dict[str, Any], c: Comparison) -> list[str]:
    rel = f"study/{c.name}"
    return [f"## {c.heading}", "", c.intro, "",
            f"Command: `{kept['shell']}` (the runs' commit: {kept['commits']}; {kept['hours']:.1f} h of simulation "
            "in total).", "",
            *report_body(result["markdown"]), "", "What the intervals support:", "", *verdicts(result), "",
            f"![curves]({rel}/report.png) ![paired differences]({rel}/paired_differences.png)", ""]  # fmt: skip


def score_text(score: float | None) -> str:
    return "diverged" if score is None else f"{100 * score:.2f}"


def grid_section(spec: Spec, data: dict[str, Any]) -> list[str]:
    """The learning-rate grid on the validation split: scores, choices and divergences."""
    assert spec.tune is not None
    lrs = spec.tune.values
    lines = [f"## {GRID_HEADING}", "",
             f"Each algorithm's local learning rate was picked per skew from {', '.join(lrs)} by the mean validation "
             "accuracy of the last two evaluated rounds (rounds 12 and 15 of 15; seed 0; 10 % of the training set "
             "held out, never the test set). A run whose score fell below 0.2 (chance is 0.1) counts as diverged.", "",
             *table(["alpha", "algorithm", *(f"lr {lr}" for lr in lrs), "chosen"])]  # fmt: skip
    diverged = total = 0
    at_edge: list[str] = []
    for alpha, by_arm in data["grid"].items():
        for algorithm, scores in by_arm.items():
            total += len(scores)
            diverged += sum(score is None for score in scores.values())
            best = max(lrs, key=lambda lr: scores[lr] or 0)
            if best in (lrs[0], lrs[-1]):
                at_edge.append(f"{algorithm} at Dirichlet {alpha} (lr {best})")
            lines.append(f"| {alpha} | {algorithm} | " + " | ".join(map(score_text, scores.values())) + f" | {best} |")
    lines += ["", f"{diverged} of {total} grid runs diverged."]
    if at_edge:
        lines.append("Chosen at an end of the grid, so the best rate may lie beyond it: " + ", ".join(at_edge) + ".")
    lines += ["", f"Server learning rates (FedAvg clients, Dirichlet {SERVER_ALPHA}, same protocol):", "",
              *table(["server", "server lr", "validation accuracy"])]
    chosen = []
    for server, scores in data["server_grid"].items():
        lines += [f"| {server} | {rate} | {score_text(score)} |" for rate, score in scores.items()]
        rates = list(scores)
        best = max(rates, key=lambda rate: scores[rate] or 0)
        chosen.append(f"{server} {best}" + (" (an end of its grid)" if best in (rates[0], rates[-1]) else ""))
    return lines + ["", "Chosen: " + ", ".join(chosen) + ".", ""]


def made_lines(spec: Spec, made: dict[str, Any]) -> list[str]:
    return [f"Made on {made['machine']} with {made['cores']} cores, no GPU, shared with other jobs; page written at "
            f"commit {made['commit']} on {made['date']}. Runs whose commit is not recorded were made before "
            "config.json kept provenance, at commit d3e3239 (branch study-base: 5a92930 with the validation split), "
            "whose numbers equal main's (`scripts/reference_metrics.py --compare`). Regenerate the runs with "
            f"`fedpfn study run {spec.path}` (restartable; the follow-up studies it names run the other comparisons) "
            f"and this page with `fedpfn study page {spec.path} --trust-code`, or from its stored results alone "
            f"with `fedpfn study page --stored {spec.path} --trust-code`.", ""]  # fmt: skip


def finished_results(spec: Spec, data: dict[str, Any], reports: dict[str, dict[str, Any]]) -> list[tuple[str, dict]]:
    """Each finished comparison's heading and report, in the page's order (what *In short* reads)."""
    kept = {k["name"] for k in data["sections"]}
    return [(c.heading, reports[c.name]) for c in comparisons(spec, data["ratio_folders"]) if c.name in kept]


def page_lines(spec: Spec, data: dict[str, Any], reports: dict[str, dict[str, Any]]) -> list[str]:
    """The page between its template's title and its closing pointers (*In short* is its own marker's)."""
    kept = {k["name"]: k for k in data["sections"]}
    body, answers, pending = grid_section(spec, data), [], []
    for c in comparisons(spec, data["ratio_folders"]):
        if c.name in kept:
            body += section(reports[c.name], kept[c.name], c)
            answers += [f"- **{c.heading}**", *(f"  {line}" for line in verdicts(reports[c.name], final=False))]
            if c.name.startswith("anchors-"):
                answers.append(f"  - Caveat: {ANCHORS_CAVEAT}")
        else:
            pending.append(f"- {c.heading}: `{', '.join(c.folders)}`")
            answers.append(f"- **{c.heading}**: not yet run.")
    pending += [f"- FedPNU at anchor ratio {f.rsplit('-r', 1)[1]}: `{f}`" for f in data.get("pending_ratios", [])]
    lines = [*made_lines(spec, data["made"]), "## Answers", "",
             "What the paired intervals over seeds support, comparison by comparison "
             "(accuracy averaged over the last rounds; the sections below give the final round too):", "",
             *answers, "", *body]  # fmt: skip
    if pending:
        lines += ["## Not yet run", "", "These comparisons' runs are not finished, so this page says nothing about "
                  f"them; `fedpfn study run {spec.path}` and the follow-up runs continue the study where it stopped:",
                  "", *pending, ""]  # fmt: skip
    return lines
