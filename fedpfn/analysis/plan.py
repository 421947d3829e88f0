"""How many seeds a difference needs, said before running, from an earlier run's spread
(the command is fedpfn.study.seeds_needed: `fedpfn seeds-needed`).

Each earlier comparison's per-seed differences give a std; the seeds needed are the fewest with
which the decision rule (fedpfn.analysis.inference: the two-sided paired t test) detects a true
difference of that size with 80 % power, at the level a family of m comparisons asks of its
smallest p under Holm (0.05 / m). A std from a few seeds is itself uncertain, so the range over
its 95 % interval (`std_factors`) is given beside. The exact sign-flip test, the check printed
beside the t test, cannot go below 2/2^n whatever the difference: its floor is said too.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

from fedpfn.analysis.inference import ALPHA, POWER, Paired, mde, recompute, std_factors
from fedpfn.analysis.paired_text import size_text
from fedpfn.core.files import read_json
from fedpfn.core.settings import ConfigError

MOST_SEEDS = 100_000  # beyond this a difference is called out of reach
REPORTS = ("comparison.json", "report.json")  # what `fedpfn compare` and `fedpfn report` write


def seeds_needed(std: float, difference: float, alpha: float = ALPHA) -> int | None:
    """The fewest seeds (2 or more) whose MDE at `alpha` is at most `difference`; None beyond MOST_SEEDS."""
    if std == 0:
        return 2
    if mde(2, std, alpha) <= difference:  # type: ignore[operator]  (std > 0: an MDE exists)
        return 2
    low, high = 2, 4
    while mde(high, std, alpha) > difference:  # type: ignore[operator]
        if high >= MOST_SEEDS:
            return None
        low, high = high, min(2 * high, MOST_SEEDS)
    while high - low > 1:  # the MDE falls as seeds are added: bisect
        middle = (low + high) // 2
        low, high = (middle, high) if mde(middle, std, alpha) > difference else (low, middle)  # type: ignore[operator]
    return high


def seeds_text(count: int | None) -> str:
    """A count from `seeds_needed` as said: beyond MOST_SEEDS, out of reach."""
    return f"more than {MOST_SEEDS:,}" if count is None else str(count)


def exact_seeds(alpha: float = ALPHA) -> int:
    """The fewest seeds with which the exact sign-flip test can go below `alpha` at all (2/2^n < alpha)."""
    return math.floor(math.log2(2 / alpha)) + 1


def need_text(p: Paired, difference: float, family: int, scale: float, unit: str) -> str:
    """One comparison's plan: its earlier spread, the seeds the difference needs, and their range."""
    head = f"- {p.label} ({p.metric})"
    if p.std is None or len(p.diffs) < 2:
        return f"{head}: no spread to plan from ({len(p.diffs)} seed{'s' * (len(p.diffs) != 1)} kept)"
    alpha = ALPHA / family
    factors = std_factors(len(p.diffs))
    assert factors is not None
    counts = [seeds_needed(p.std * f, difference / scale, alpha) for f in (1.0, *factors)]
    said = [seeds_text(n) for n in counts]
    return (f"{head}: the std of its differences was {size_text(scale * p.std)} {unit} over {len(p.diffs)} seeds; "
            f"{size_text(difference, signed=False)} {unit} needs {said[0]} seeds ({said[1]} to {said[2]} over that std's "
            f"95 % interval)")  # fmt: skip


def plan_lines(found: Sequence[tuple[list[Paired], float, str]], difference: float) -> list[str]:
    """Every family's comparisons planned at Holm's first level for its size, then the exact test's floor."""
    lines = []
    for family, scale, unit in found:
        lines += [need_text(p, difference, len(family), scale, unit) for p in family]
    sizes = sorted({len(family) for family, _, _ in found})
    levels = "; ".join(f"p < {ALPHA / m:.3g} (a family of {m})" if m > 1 else f"p < {ALPHA:g}" for m in sizes)
    exact = "; ".join(f"{exact_seeds(ALPHA / m)} seeds for {ALPHA / m:.3g}" for m in sizes)
    return [f"Seeds for a true difference of {difference:g} at {100 * POWER:g} % power, by the two-sided paired t "
            f"test that decides, at the level Holm asks of a family's smallest p: {levels}.", *lines,
            f"The exact sign-flip test beside it cannot go below 2/2^n whatever the difference: it needs {exact}."]  # fmt: skip


def from_report(path: Path, metric: str) -> list[tuple[list[Paired], float, str]]:
    """A report's (or comparison's) stored comparisons of `metric`: one family, in accuracy points."""
    if path.is_dir():
        path = next((path / name for name in REPORTS if (path / name).is_file()), path / REPORTS[0])
    data = read_json(path)
    family = [recompute(p, 1.0) for p in data.get("paired", []) if p.get("metric") == metric]
    if not family:
        raise ConfigError(f"{path}: no comparison of metric '{metric}' to plan from")
    return [(family, 100.0, "points")]
