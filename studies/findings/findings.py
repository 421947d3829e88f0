"""The bottom line of docs/analysis/findings.md, computed from the studies' stored results.

Each sentence reads one stored file (the drift study's reports under docs/study/, the gate's
docs/alignment/cells.json, the federated studies' docs/alignment/*.json) and says its figure with
its 95 % interval and what the interval excludes; a study whose results are not stored is said to
be missing, never guessed. Written for a newcomer: what was compared, on what, and how sure.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from fedpfn.analysis.inference import Paired, decided
from fedpfn.analysis.paired_text import p_number, printed
from fedpfn.study.page import family_rows, margin_text
from fedpfn.study.spec import load
from studies.alignment_gate import gate
from studies.alignment_gate.gate import interval_text as interval
from studies.drift.readings import design, report_folder
from studies.drift.text import primary_family

DRIFT_STUDY = "studies/drift/drift.toml"


def read(root: Path, relative: str) -> Any | None:
    path = root / relative
    return json.loads(path.read_text()) if path.is_file() else None


def reading(p: Paired, scale: float, unit: str) -> str:
    """What the comparison supports: its direction where Holm's p resolves it, else what its
    interval excludes (or that the seeds cannot resolve what the interval shows)."""
    printed(p, scale, unit)
    if p.low is None or p.high is None:
        return "no interval (too few seeds or no spread)"
    if decided(p):
        return f"{'higher' if p.mean > 0 else 'lower'} (p Holm {p_number(p.p_holm, '.2g')})"
    if p.low > 0 or p.high < 0:
        return (f"the interval excludes 0, but {len(p.seeds)} seeds do not resolve it after Holm "
                f"(p Holm {p_number(p.p_holm, '.2g')})")  # fmt: skip
    return f"not resolved: the interval excludes gains above {scale * p.high:+.2f} and losses below {scale * p.low:+.2f} {unit}"


def drift_rows(root: Path) -> dict[str, Any] | None:
    """The drift study's primary family as its page computes it (studies.drift.text), by label."""
    if not (root / DRIFT_STUDY).is_file():
        return None
    spec = load(root / DRIFT_STUDY)
    d = design(spec)
    folders = {alpha: {name: root / report_folder(spec, alpha, name) / "report.json" for name in d.reports}
               for alpha in d.alphas}  # fmt: skip
    if not all(path.is_file() for names in folders.values() for path in names.values()):
        return None
    reports = {alpha: {name: json.loads(path.read_text()) for name, path in names.items()}
               for alpha, names in folders.items()}  # fmt: skip
    return {row.name: row for row in primary_family(d, reports)}


def drift_sentence(root: Path, base: str, lead: str) -> str | None:
    rows = drift_rows(root)
    if rows is None:
        return None
    parts = [f"{100 * row.test.mean:+.2f} points at {name.split(':')[0]} (95 % CI {interval(row.test, 100, 2)}; "
             f"{reading(row.test, 100, 'points')})" for name, row in rows.items() if name.endswith(f"FedPFN − {base}")]  # fmt: skip
    return f"{lead}: FedPFN's accuracy minus it was {' and '.join(parts)}."


def accuracy_beat(root: Path) -> str | None:
    return drift_sentence(root, "FedAvg", "**Did FedPFN beat FedAvg?** In the drift study (Fashion-MNIST, an MLP, "
                          "100 clients with strong label skew, 5 seeds, test accuracy over the last 10 of 100 "
                          "rounds, docs/results.md; Holm across its 4 primary comparisons), against FedAvg")  # fmt: skip


def accuracy_control(root: Path) -> str | None:
    return drift_sentence(root, "control",
                          "Against the control that freezes as many weights without sharing them (a mask per client)")


def gate_cells(root: Path) -> dict[str, Any] | None:
    return read(root, "docs/alignment/cells.json")


MODEL_WORDS = {"resnet20": "ResNet-20", "vgg11": "VGG-11"}  # as papers write them; MLP and CNN in capitals


def setting_words(config: Mapping[str, Any]) -> str:
    """A gate regime's setting in words, from the config its cells ran with."""
    data = "the same data" if config.get("split") == "same-data" else f"a Dirichlet α = {config.get('alpha')} split"
    start = "one random start" if config.get("start") == "init" else f"one start trained {config.get('start', '')[8:]} epoch(s)"
    width = f" of width {config['width']}" if config.get("width") else ""  # 0: the model's own width
    model = MODEL_WORDS.get(config.get("model", "?"), config.get("model", "?").upper())
    return f"{model}{width}, {data}, {start}, lr {config.get('lr', '?')}"


def misalignment(root: Path) -> str | None:
    cells = gate_cells(root)
    if not cells:
        return None
    plain_arms: dict[tuple, list[str]] = {}  # (setting, P seed by seed) -> the regimes whose plain arm it is
    for name, regime in cells.items():
        series = gate.series(regime, "plain", "permutation_loss")
        if len(series) >= gate.A_SEEDS:  # as the gate's page reads a regime
            key = (setting_words(regime["config"]), tuple(sorted(series.items())))
            plain_arms.setdefault(key, []).append(name)
    parts, lows, seen = [], [], set()
    for (words, series), names in plain_arms.items():
        p = gate.against_zero("P", dict(series))
        lows.append(p.low if p.low is not None else p.mean)  # no spread: the same P in every seed
        spread = f"95 % CI {interval(p, digits=3)}" if p.low is not None else "the same in every seed"
        shared_by = names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"
        again = f"{words}, again in other runs: the plain arm of {shared_by}" if words in seen else words
        seen.add(words)
        control = gate.against_zero("P", gate.series(cells[names[0]], "diff-init", "permutation_loss"))
        void = "" if gate.above_zero(control) else "; void: its positive control did not move under this matching"
        parts.append(f"{p.mean:+.3f} nats ({again}; {spread}, {len(p.seeds)} seeds{void})")
    found = "lose less" if lows and min(lows) > 0 else "do not in every setting lose less"
    return ("**Is there misalignment for anchors to remove?** Outside a federation, two models trained apart "
            f"from one start (the gate, docs/alignment.md) {found} when averaged after a permutation found by "
            "weight matching; what it removes, P, was " + "; ".join(parts) + ".")  # fmt: skip


def split_parts(root: Path) -> list[tuple[str, list[Any]]]:
    """Each gate regime with enough seeds and its three endpoints' splits (Holm as on the gate's page)."""
    cells = gate_cells(root) or {}
    found = []
    for name, regime in cells.items():
        if len(gate.series(regime, gate.arm_named(regime, "shared"), "permutation_loss")) >= gate.B_SEEDS:
            splits = gate.regime_splits(name, regime)
            gate.adjust_together(p for s in splits for p in s.parts)
            found.append((name, splits))
    return found


def other_matchers(name: str, regime: Mapping[str, Any]) -> tuple[list[float], str]:
    """Freezing's share of P's drop under each matcher besides full, as words and values."""
    shares, words = [], []
    for matcher in gate.matchers_in(regime)[1:]:
        found = gate.regime_splits(name, regime, matcher)[0]
        gate.adjust_together(found.parts)  # its own family of 3, as on the gate's page
        share = found.share(found.freezing)
        if share is not None:
            shares.append(share)
            words.append(f"{100 * share:.0f} % under {matcher}")
    return shares, f" ({', '.join(words)})" if words else ""


def freezing_or_sharing(root: Path) -> str | None:
    cells = gate_cells(root) or {}
    parts, shares, unresolved = [], [], []
    for name, splits in split_parts(root):
        s = splits[0]
        share = s.share(s.freezing)
        if share is None:
            unresolved.append(name)
        else:
            more, said = other_matchers(name, cells[name])
            shares += [share, *more]
            parts.append(f"{100 * share:.0f} % in {name} under full weight matching{said}; sharing adds "
                         f"{s.sharing.mean:+.4f} nats under full (95 % CI {interval(s.sharing, digits=3)}: "
                         f"{reading(s.sharing, 1.0, 'nats')})")  # fmt: skip
    if not parts:
        return None
    lead = "Most of what shared anchors remove of P, freezing alone removes" if min(shares) > 0.5 else (
        "Of what shared anchors remove of P, freezing alone removes a part")  # fmt: skip
    rest = (f" In {' and '.join(unresolved)} the share is not resolved: the whole drop in P (shared − plain) is not "
            "resolved under the regime's Holm family." if unresolved else "")  # fmt: skip
    return (f"**Sharing or freezing?** {lead}: independent masks that freeze as many weights and share "
            "nothing account for " + "; ".join(parts) + "." + rest)  # fmt: skip


def fused_accuracy(root: Path) -> str | None:
    parts = [f"{100 * s[1].sharing.mean:+.2f} points in {name} (95 % CI {interval(s[1].sharing, 100, 2)}; "
             f"{reading(s[1].sharing, 100, 'points')})" for name, s in split_parts(root)]  # fmt: skip
    if not parts:
        return None
    return "On the averaged model's accuracy, sharing the anchors added " + "; ".join(parts) + "."


def federated(root: Path) -> str | None:
    stored = read(root, "docs/alignment/federated.json")
    if stored is None:
        return None
    means = [sum(v.values()) / len(v) for v in stored["figures"]["mean P (nats)"].values()]
    return (f"**In a federation?** In the first federated study (an MLP, about {stored['steps_per_round']:.0f} "
            f"local steps a round) matching found almost no permutation between a round's clients (mean P "
            f"between {min(means):+.4f} and {max(means):+.4f} nats in every arm), so that study could not test "
            "the mechanism.")  # fmt: skip


def _block_means(block: Mapping[str, Any], key: str) -> float:
    runs = block["runs"]["plain"].values()
    return sum(run[key] for run in runs) / len(runs)


PILOTS = (("the MLP", "docs/alignment_pilot.md", "docs/alignment/pilot.json"),
          ("the CNN", "docs/alignment_pilot_cnn.md", "docs/alignment/pilot-cnn.json"))  # fmt: skip


def pilot_clause(model: str, page: str, stored: Mapping[str, Any]) -> str:
    """One pilot's finished blocks: P between a round's plain clients in round 1 and at the last, and its pick."""
    blocks = [stored["blocks"][name] for name in stored["finished"]]
    first, last = ([_block_means(b, key) for b in blocks] for key in ("P_r1", "P_last"))
    span = lambda values: (f"{round(min(values), 4) + 0.0:+.4f} to {round(max(values), 4) + 0.0:+.4f}" if len(values) > 1
                           else f"{round(values[0], 4) + 0.0:+.4f}")  # noqa: E731  (no -0.0000)  # fmt: skip
    seeds = len(blocks[0]["runs"]["plain"])
    picked = (f"its rule picked {stored['pick']}" if stored.get("pick") else
              "no block met its rule")  # fmt: skip
    many = len(blocks) > 1
    return (f"{span(first)} nats in round 1, from the random start, and {span(last)} nats at the last round, from a "
            f"trained aggregate, on {model} ({page}; {len(blocks)} block{'s' * many} of local steps and learning "
            f"rate, {seeds} seeds{' each' * many}; {picked})")  # fmt: skip


def pilot(root: Path) -> str | None:
    """What the pilots' finished blocks found between a round's plain clients, first round against the trained one."""
    found = [(model, page, stored) for model, page, path in PILOTS
             if (stored := read(root, path)) is not None and stored.get("finished")]  # fmt: skip
    if not found:
        return None
    clauses = [pilot_clause(*one) for one in found]
    none_picked = not any(stored.get("pick") for *_, stored in found)
    return (f"In the pilots (5 clients a round), P between a round's plain clients, a block's mean over seeds, was "
            f"{'; '.join(clauses)}"
            + (", so no federated regime was found where clients stay misaligned." if none_picked else "."))


MAIN_STUDY = "studies/alignment_main/alignment_main.toml"
CONFIRM_STUDY = "studies/alignment_confirm/alignment_confirm.toml"
SKEWED_STUDY = "studies/alignment_confirm/alignment_confirm_a01.toml"


def study_rows(root: Path, study: str, family: str) -> list[Paired]:
    """A family of a federated study as its page computes it, from its stored results ([] where not stored)."""
    if not (root / study).is_file():
        return []
    spec = load(root / study)
    assert spec.page is not None
    stored = read(root, str(spec.page.stored))  # relative to where fedpfn runs: the checkout, here
    return [] if stored is None else family_rows(spec, stored, family)


def points_text(rows: list[Paired]) -> str:
    """Each comparison at its axes point: the difference in points, its interval and its reading."""
    return "; ".join(f"{100 * p.mean:+.2f} points at {p.label.split(':')[0]} (95 % CI {interval(p, 100, 2)}; "
                     f"{reading(p, 100, 'points')})" for p in rows)  # fmt: skip


def study_setting(root: Path, study: str) -> str:
    """A federated study's setting in words, read from its declaration."""
    spec = load(root / study)
    flag = lambda name: spec.shared[spec.shared.index(name) + 1]  # noqa: E731
    return (f"the {flag('--model').upper()}, {flag('--num-clients')} clients, {flag('--clients-per-round')} a round, "
            f"{flag('--local-epochs')} local epochs at lr {flag('--lr')}, {len(spec.seeds)} seeds, test accuracy over "
            f"the last {spec.endpoints['acc'].last} of {flag('--rounds')} rounds")  # fmt: skip


def arm_lr(root: Path, study: str, arm: str) -> str:
    """The learning rate an arm of a study runs at: its own `--lr`, else the study's shared one."""
    spec = load(root / study)
    flags = spec.arms[arm] if "--lr" in spec.arms[arm] else spec.shared
    return flags[flags.index("--lr") + 1]


def slower_lr(root: Path, study: str) -> str:
    """The learning rate of the study's `step` family's baseline (FedAvg with a smaller step)."""
    return arm_lr(root, study, load(root / study).families["step"].baseline)


def main_study(root: Path) -> str | None:
    """The exploratory federated study's accuracy comparisons, each with its interval and reading."""
    fedpfn = [p for p in study_rows(root, MAIN_STUDY, "accuracy") if p.label.endswith("FedPFN − FedAvg")]
    if not fedpfn:
        return None
    return (f"**Did FedPFN beat FedAvg in a federation?** In the exploratory federated study (docs/alignment_main.md; "
            f"{study_setting(root, MAIN_STUDY)}; Holm within each family), FedPFN minus FedAvg was {points_text(fedpfn)}. "
            f"Against FedAvg at lr {slower_lr(root, MAIN_STUDY)} it was {points_text(study_rows(root, MAIN_STUDY, 'step'))}; "
            f"against the control that freezes as much and shares nothing, "
            f"{points_text(study_rows(root, MAIN_STUDY, 'sharing'))}.")  # fmt: skip


def sharing_text(root: Path, study: str) -> str:
    """A study's `sharing` family in words, with what its interval says of the margin declared before the runs."""
    sharing = study_rows(root, study, "sharing")
    margin = load(root / study).families["sharing"].margin
    within = "".join(f", {margin_text(p, margin, 100, 'points')}" for p in sharing if margin is not None)
    return points_text(sharing) + within


def confirm_study(root: Path) -> str | None:
    """The confirmatory federated study's three pre-registered hypotheses, each with its interval and reading."""
    step = study_rows(root, CONFIRM_STUDY, "step")
    if not step:
        return None
    fedpfn = [p for p in study_rows(root, CONFIRM_STUDY, "accuracy") if p.label.endswith("FedPFN − FedAvg")]
    return (f"**Did it hold on new seeds?** The confirmatory study (docs/alignment_confirm.md; pre-registered, "
            f"{study_setting(root, CONFIRM_STUDY)}, seeds the exploratory study never ran) found FedPFN minus FedAvg at "
            f"lr {slower_lr(root, CONFIRM_STUDY)} (primary) {points_text(step)}; minus the control, "
            f"{sharing_text(root, CONFIRM_STUDY)}; minus FedAvg at the same lr, {points_text(fedpfn)}.")  # fmt: skip


def skewed_study(root: Path) -> str | None:
    """The confirmatory test at Dirichlet 0.1: its three pre-registered hypotheses, each with its interval."""
    anchoring = study_rows(root, SKEWED_STUDY, "anchoring")
    if not anchoring:
        return None
    lr = lambda arm: arm_lr(root, SKEWED_STUDY, arm)  # noqa: E731
    return (f"**And where clients drift most?** The confirmatory test at Dirichlet 0.1 (docs/alignment_confirm_a01.md; "
            f"pre-registered, {study_setting(root, SKEWED_STUDY)}, seeds the exploratory study never ran) found FedPFN "
            f"minus FedAvg, both at lr {lr('fedavg-lr003')} (primary), {points_text(anchoring)}; minus the control at "
            f"the same lr, {sharing_text(root, SKEWED_STUDY)}; FedPFN at lr {lr('fedpfn')} minus FedAvg at lr "
            f"{lr('fedavg-lr003')}, {points_text(study_rows(root, SKEWED_STUDY, 'step'))}.")  # fmt: skip


SENTENCES: tuple[Callable[[Path], str | None], ...] = (
    accuracy_beat, accuracy_control, misalignment, freezing_or_sharing, fused_accuracy, federated, pilot, main_study,
    confirm_study, skewed_study,
)


def bottom_line(root: Path) -> list[str]:
    """Every sentence whose stored results exist, in order; one line naming any that are missing."""
    said, missing = [], []
    for sentence in SENTENCES:
        text = sentence(root)
        (said if text else missing).append(text or sentence.__name__)
    if missing:
        said.append(f"Not yet computed, for want of stored results: {', '.join(missing)}.")
    return said
