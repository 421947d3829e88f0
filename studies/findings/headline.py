"""The finding in one sentence: does FedPFN help federated training, and why? With its table.

Built from the stored results by one rule (`sentence`), never typed: the primary question is
FedPFN against FedAvg at a step that suits FedAvg, as every pre-registered test asked it (the
drift study at each arm's tuned step, both skews; the confirmatory tests' H1 at Dirichlet 0.5 and
0.1). How many of those the one decision rule (fedpfn.analysis.inference.decided) resolves, and
which way, gives the answer's first word; the why is the confirmatory study's other two
hypotheses: FedPFN against FedAvg at FedAvg's own large step (a gain that FedAvg at a smaller
step takes back says anchoring acts as a smaller step), and FedPFN against the control that
freezes as many weights without sharing them, read against the margin declared before the runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from fedpfn.analysis.inference import Paired, decided
from fedpfn.analysis.markup import table
from fedpfn.analysis.paired_text import verdict
from fedpfn.study.page import inside_margin
from fedpfn.study.spec import load
from studies.findings.findings import CONFIRM_STUDY, SKEWED_STUDY, arm_lr, drift_rows, slower_lr, study_rows

MOST_WORDS = 60


@dataclass(frozen=True)
class Row:
    """One row of the table: the question, where it was asked, and its comparison (accuracy, a fraction)."""

    question: str
    setting: str
    p: Paired
    primary: bool = False  # FedPFN against FedAvg at a step that suits FedAvg
    margin: float | None = None  # points: the sharing family's, declared before the runs


def alpha_of(p: Paired) -> str:
    """The Dirichlet α a study's comparison was made at, from its label ('alpha=0.5: ...' or 'α=0.5: ...')."""
    return p.label.split(":")[0].split("=")[-1]


def rows(root: Path) -> list[Row] | None:
    """The table's rows from the stored results, or None where a study's are missing."""
    drift = drift_rows(root)
    step, anchoring = study_rows(root, CONFIRM_STUDY, "step"), study_rows(root, SKEWED_STUDY, "anchoring")
    same = [p for p in study_rows(root, CONFIRM_STUDY, "accuracy") if p.label.endswith("FedPFN − FedAvg")]
    sharing = study_rows(root, CONFIRM_STUDY, "sharing")
    if drift is None or not (step and anchoring and same and sharing):
        return None
    tuned = [row.test for name, row in drift.items() if name.endswith("FedPFN − FedAvg")]
    n = lambda p: f"{len(p.seeds)} seeds"  # noqa: E731
    slow, fast = slower_lr(root, CONFIRM_STUDY), arm_lr(root, CONFIRM_STUDY, "fedpfn")
    return [
        Row("Does FedPFN beat FedAvg at FedAvg's better step?", f"confirmatory, MLP, Dirichlet {alpha_of(step[0])}, "
            f"FedPFN at lr {fast}, FedAvg at lr {slow}, {n(step[0])}", step[0], primary=True),
        Row("... where clients drift most?", f"confirmatory, MLP, Dirichlet {alpha_of(anchoring[0])}, both at lr "
            f"{arm_lr(root, SKEWED_STUDY, 'fedavg-lr003')}, {n(anchoring[0])}", anchoring[0], primary=True),
        *(Row("... with each arm's own tuned step?", f"drift study, MLP, 100 clients, Dirichlet {alpha_of(p)}, {n(p)}",
              p, primary=True) for p in tuned),
        Row("Is it sharing the anchors, not freezing?", f"FedPFN − per-client masks (as much frozen), Dirichlet "
            f"{alpha_of(sharing[0])}, {n(sharing[0])}", sharing[0], margin=load(root / CONFIRM_STUDY).families["sharing"].margin),
        Row("Does it beat FedAvg at the same step?", f"both at lr {fast}, Dirichlet {alpha_of(same[0])}, {n(same[0])}",
            same[0]),
    ]  # fmt: skip


def shown(p: Paired) -> str:
    """A difference in points with its 95 % interval: '+0.16 points [+0.08, +0.24]'."""
    assert p.low is not None and p.high is not None
    return f"{100 * p.mean:+.2f} points [{100 * p.low:+.2f}, {100 * p.high:+.2f}]"


def lead(primary: list[Paired]) -> str:
    """The answer's first words: how the primary comparisons were resolved, by the one rule."""
    up = [p for p in primary if decided(p) and p.mean > 0]
    down = [p for p in primary if decided(p) and p.mean < 0]
    word = ("Yes" if len(up) == len(primary) else "Mixed" if up and down else "Seldom" if up else
            "No, it did worse" if down else "No resolved gain")  # fmt: skip
    left = len(primary) - len(up) - len(down)
    parts = [f"{name} in {len(found)}" + (f" ({shown(found[0])})" if len(found) == 1 else "")
             for name, found in (("higher", up), ("lower", down)) if found] + ([f"not resolved in {left}"] if left else [])
    said = " and ".join([", ".join(parts[:-1]), parts[-1]] if len(parts) > 1 else parts)
    return f"{word}: against FedAvg at its better step, FedPFN was {said} of {len(primary)} pre-registered tests"


def why(same: Row, step: Row, sharing: Row) -> str:
    """The reasons the confirmatory study can give: a smaller step, and sharing against freezing."""
    gain = decided(same.p) and same.p.mean > 0
    kept = decided(step.p) and step.p.mean > 0
    if gain:
        lr = same.setting.split(",")[0].removeprefix("both ")
        step_said = (f"it keeps its gain over FedAvg {lr} ({shown(same.p)}) against a smaller step" if kept else
                     f"what it gains over FedAvg {lr} ({shown(same.p)}) FedAvg gets from a smaller step")  # fmt: skip
    else:
        step_said = f"it does not beat FedAvg even at the same step ({shown(same.p)})"
    p, margin = sharing.p, sharing.margin
    if margin is not None and inside_margin(p, margin, 100):
        share_said = f"sharing anchors adds less than ±{margin:g} points over freezing alone ({shown(p)})"
    elif decided(p):
        share_said = f"sharing anchors changes {shown(p)} over freezing alone"
    else:
        share_said = f"what sharing adds over freezing alone is not resolved ({shown(p)})"
    return f"{step_said}, and {share_said}"


def sentence(found: list[Row]) -> str:
    """The one sentence, at most MOST_WORDS words: the answer, then why."""
    primary = [row.p for row in found if row.primary]
    same, step = found[-1], found[0]
    sharing = next(row for row in found if row.margin is not None)
    return f"{lead(primary)}; {why(same, step, sharing)}."


def answers_table(found: list[Row]) -> list[str]:
    """At most six rows: question, setting, difference, 95 % interval, verdict (the one rule's)."""
    lines = table(["question", "setting", "difference, points", "95 % interval", "verdict"])
    for row in found:
        p = row.p
        assert p.low is not None and p.high is not None
        said = verdict(p).split(";")[0]
        if row.margin is not None and inside_margin(p, row.margin, 100):
            said += f"; inside the ±{row.margin:g}-point margin declared before the runs"
        lines.append(f"| {row.question} | {row.setting} | {100 * p.mean:+.2f} | [{100 * p.low:+.2f}, {100 * p.high:+.2f}] "
                     f"| {said} |")  # fmt: skip
    return lines


def finding(root: Path) -> list[str]:
    """The block's lines: the sentence, then the table; a line naming what is missing otherwise."""
    found = rows(root)
    if found is None:
        return ["Not yet computed, for want of stored results of the drift and confirmatory studies."]
    return [f"**{sentence(found)}**", "", *answers_table(found)]
