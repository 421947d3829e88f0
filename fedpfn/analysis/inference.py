"""Inference over seeds: the one mean ± std, the paired test of arm − baseline, Holm and the MDE.

A comparison is the per-seed differences arm − baseline (a positive mean: the arm is higher).
One decision rule, at any number of seeds (`decided`, the only place a verdict is made):

- **The t test decides.** Student's paired t test (n-1 df) gives the p and the 95 % interval
  printed beside it, so a verdict can never contradict its interval: p < 0.05 exactly when the
  interval excludes 0. Holm adjusts the family the study declared (`adjust_together`), or each
  metric's comparisons of one report (`adjust`); "higher" or "lower" needs the Holm p < 0.05, and
  an interval that excludes 0 where Holm's does not is said so (paired_text.verdict). No study in
  studies/ registered another decider (an exploratory one named the exact test beside its t
  test); where nothing was registered (`fedpfn compare`, the attack and privacy pages) this is
  the documented default.
- **The exact test stands beside.** The two-sided sign-flip test (`sign_flip_test`) assumes only
  that each difference is as likely positive as negative under no effect; it is a check, never
  the decider. It cannot go below 2 / 2^n (`Paired.p_floor`: 0.25 at 3 seeds, 0.0625 at 5), and
  pages say so where it limits what the seeds can show without the t test's normality.
- **No spread.** Differences equal to within `RELATIVE_TOLERANCE` of the values' scale (float
  noise: 7.85e-17 between two accuracies is not a spread) get no p-value and no interval; the
  comparison says they are all equal (`Paired.equal_within`).
- **The MDE** (the true mean difference the t test detects with 80 % power) is omitted, with the
  reason (`Paired.mde_why`), where it exceeds the metric's range (`span`: an accuracy difference
  cannot exceed ±1). `plan` turns an earlier run's spread into the seeds a difference needs.
- Before 2026-12-07 the exact test decided up to `FORMER_EXACT_UP_TO` seeds; `changed_by_rule`
  names the verdicts that rule change turned, so each page can list them.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy import optimize, stats

CONFIDENCE = 0.95
ALPHA = 1 - CONFIDENCE  # two-sided test level, matching the interval
POWER = 0.8  # for the minimum detectable effect
FORMER_EXACT_UP_TO = 5  # up to these seeds the exact test decided before 2026-12-07 (its floor is above 0.05 there)
EXACT_MAX_SEEDS = 16  # the exact test enumerates 2^n sign patterns: computed up to this many seeds
RELATIVE_TOLERANCE = 1e-9  # differences closer than this times the values' scale are equal
NOT_KEPT = "differences not kept"  # a stored comparison without its per-seed differences: no test can be redone


@dataclass
class Paired:
    """Arm minus baseline on the same seed, for one metric, with its test.

    `p_value` is the paired t test's, the decider, and `low`/`high` its interval; None with one
    seed or with every difference equal (`equal_within`: the tolerance they are equal within).
    `p_exact` is the exact sign-flip test's, the distribution-free check beside it, and `p_floor`
    the smallest that test can give with these seeds (ties counted); None above EXACT_MAX_SEEDS.
    `test` is NOT_KEPT for a stored comparison without its differences. `mde` is None where
    `mde_why` says why; `span` is the largest difference the metric can take, if bounded.
    `p_holm` is set by `adjust` or `adjust_together`, across the family the comparison is in.
    """

    label: str
    metric: str
    seeds: list[int]
    diffs: list[float]
    mean: float
    std: float | None
    low: float | None
    high: float | None
    p_value: float | None
    mde: float | None
    wins: int
    ties: int
    p_holm: float | None = None
    test: str = "t"
    p_floor: float | None = None
    equal_within: float | None = None
    span: float | None = None
    mde_why: str | None = None
    p_exact: float | None = None

    @property
    def at_floor(self) -> bool:
        """Whether the exact test's p is the smallest it can give with these seeds."""
        return None not in (self.p_exact, self.p_floor) and self.p_exact <= self.p_floor * (1 + 1e-9)


def decided(p: Paired) -> bool:
    """The one decision rule: the family's Holm-adjusted t test below ALPHA (so the interval excludes 0)."""
    return p.p_holm is not None and p.p_holm < ALPHA


def changed_by_rule(p: Paired) -> bool:
    """Whether the rule of 2026-12-07 turned this verdict: up to FORMER_EXACT_UP_TO seeds the exact
    test decided before, and its floor (2/2^n >= 0.0625) kept every such comparison unresolved."""
    return decided(p) and len(p.seeds) <= FORMER_EXACT_UP_TO


def mean_std(values: Sequence[float]) -> tuple[float, float | None]:
    """Mean and sample standard deviation (n-1); no std from one value (JSON: null)."""
    array = np.asarray(values, dtype=float)
    return float(array.mean()), (float(array.std(ddof=1)) if len(array) > 1 else None)


def mde(n: int, std: float | None, alpha: float = ALPHA, power: float = POWER) -> float | None:
    """The smallest true mean difference that a two-sided paired t test at `alpha` over n seeds
    detects with probability `power`, if the differences' std is `std` (the observed one).
    `alpha` is one comparison's level, before Holm's adjustment: under Holm the detectable
    difference is larger still.

    Exact, by the noncentral t: with δ the true mean difference, the statistic follows
    nct(n-1, δ√n/std) and the power is P(T > c) + P(T < -c), c the t quantile 1 - alpha/2
    (the lower tail as P(T' > c) with T' ~ nct(n-1, -δ√n/std), which scipy computes stably).
    The noncentrality is found by brentq and scaled back to a difference. None for one seed
    or no spread.
    """
    if n < 2 or not std:
        return None
    df = n - 1
    crit = stats.t.ppf(1 - alpha / 2, df)

    def shortfall(nc: float) -> float:
        return float(stats.nct.sf(crit, df, nc) + stats.nct.sf(crit, df, -nc)) - power

    high = crit + 4.0
    while shortfall(high) < 0:  # at most a few doublings: the power rises to 1 with the noncentrality
        high *= 2
    return float(optimize.brentq(shortfall, 0.0, high) * std / math.sqrt(n))


def std_factors(n: int, confidence: float = CONFIDENCE) -> tuple[float, float] | None:
    """The `confidence` interval of the true std as multiples of one observed from n values
    (chi-square with n-1 df, normal differences): the MDE, proportional to the std, scales by
    the same factors. None below 2 values."""
    if n < 2:
        return None
    df, tail = n - 1, (1 - confidence) / 2
    return math.sqrt(df / stats.chi2.ppf(1 - tail, df)), math.sqrt(df / stats.chi2.ppf(tail, df))


def sign_test(diffs: Sequence[float]) -> float | None:
    """Exact two-sided sign test (scipy.stats.binomtest at 1/2) on the non-zero differences:
    with 5 seeds its smallest p is 0.0625, however large the difference. None when all are 0."""
    signs = [d for d in diffs if d != 0]
    if not signs:
        return None
    return float(stats.binomtest(sum(d > 0 for d in signs), len(signs), 0.5).pvalue)


def sign_flip_test(diffs: Sequence[float]) -> float:
    """Exact two-sided sign-flip (paired permutation) test: the share of the 2^n sign patterns
    whose |sum| is at least the observed |sum|. Its smallest value is 2/2^n (no zero differences)."""
    d = np.abs(np.asarray(diffs, dtype=float))
    n = len(d)
    signs = ((np.arange(2**n)[:, None] >> np.arange(n)) & 1) * 2 - 1
    sums = np.abs(signs @ d)
    observed = abs(float(np.sum(diffs)))
    return float(np.mean(sums >= observed - 1e-12 * max(float(d.sum()), 1e-300)))


def holm(p_values: Sequence[float | None]) -> list[float | None]:
    """Holm's step-down adjustment: the i-th smallest of the m p-values (i from 0) times m - i,
    kept non-decreasing in that order and capped at 1. A family's members without a test
    (None) stay None and do not count in m."""
    ranked = sorted((p, i) for i, p in enumerate(p_values) if p is not None)
    adjusted: list[float | None] = [None] * len(p_values)
    running = 0.0
    for rank, (p, i) in enumerate(ranked):
        running = max(running, min(1.0, (len(ranked) - rank) * p))
        adjusted[i] = running
    return adjusted


def adjust_together(comparisons: Iterable[Paired]) -> int:
    """Holm over every comparison given, whatever its metric (one declared family); how many were tested."""
    family = list(comparisons)
    for p, adjusted in zip(family, holm([q.p_value for q in family])):
        p.p_holm = adjusted
    return sum(p.p_value is not None for p in family)


def adjust(comparisons: Iterable[Paired]) -> None:
    """Set each comparison's `p_holm`, Holm-adjusting the comparisons of each metric together."""
    families: dict[str, list[Paired]] = {}
    for p in comparisons:
        families.setdefault(p.metric, []).append(p)
    for family in families.values():
        adjust_together(family)


def detectable(n: int, std: float, span: float | None) -> tuple[float | None, str | None]:
    """The t test's MDE, or None and why: it exceeds the metric's range."""
    found = mde(n, std)
    if found is not None and span is not None and found > span:
        return None, f"no difference the metric can take is detectable with {100 * POWER:g} % power by {n} seeds"
    return found, None


def compare(label: str, metric: str, seeds: Sequence[int], diffs: Sequence[float], scale: float,
            span: float | None = None) -> Paired:  # fmt: skip
    """The comparison of per-seed differences arm − baseline; `scale`: the size of the values
    differenced (the tolerance of 'equal' is relative to it), `span`: the metric's largest difference."""
    d = np.asarray(diffs, dtype=float)
    mean, std = mean_std(d)
    wins, ties, n = int((d > 0).sum()), int((d == 0).sum()), len(d)
    found = Paired(label, metric, list(seeds), d.tolist(), mean, std, None, None, None, None, wins, ties, span=span)
    if std is None:
        return found
    tolerance = RELATIVE_TOLERANCE * max(scale, span or 0.0)
    if float(d.max() - d.min()) <= tolerance:
        found.equal_within = tolerance
        return found
    test = stats.ttest_1samp(d, 0.0)
    found.low, found.high = (float(v) for v in test.confidence_interval(CONFIDENCE))
    found.p_value = float(test.pvalue)
    if n <= EXACT_MAX_SEEDS:
        found.p_exact, found.p_floor = sign_flip_test(d), sign_flip_test(np.abs(d))
    found.mde, found.mde_why = detectable(n, std, span)
    return found


def paired(label: str, metric: str, arm: Mapping[int, float], base: Mapping[int, float],
           span: float | None = None) -> Paired:  # fmt: skip
    """Per-seed difference arm − baseline on the seeds of `arm`, and its test (`compare`)."""
    seeds = sorted(arm)
    ours, theirs = (np.array([values[s] for s in seeds], dtype=float) for values in (arm, base))
    scale = float(max(np.abs(ours).max(), np.abs(theirs).max())) if seeds else 0.0
    return compare(label, metric, seeds, (ours - theirs).tolist(), scale, span)


def recompute(stored: Mapping[str, Any], span: float | None = None) -> Paired:
    """A comparison kept as JSON (before or after these rules), tested again from its differences
    (the values' scale taken as the largest difference; its Holm p unset: adjust its family again)."""
    diffs = [float(d) for d in stored["diffs"]]
    if not diffs and stored["seeds"]:  # kept as summary figures only: the interval stays, no test
        kept = {key: stored[key] for key in ("label", "metric", "seeds", "mean", "std", "low", "high", "wins", "ties")}
        return Paired(**kept, diffs=[], p_value=None, mde=None, test=NOT_KEPT, span=span)
    scale = max((abs(d) for d in diffs), default=0.0)
    return compare(stored["label"], stored["metric"], stored["seeds"], diffs, scale, span)


def retested(stored: Iterable[Mapping[str, Any]], spans: Mapping[str, float | None]) -> list[Paired]:
    """Kept comparisons tested again (`recompute`, each metric's span from `spans`), Holm within each metric."""
    found = [recompute(c, spans.get(c["metric"])) for c in stored]
    adjust(found)
    return found
