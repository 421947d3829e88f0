"""Inference over seeds: the one mean ± std, the paired test of arm − baseline, Holm and the MDE.

A comparison is the per-seed differences arm − baseline (a positive mean: the arm is higher).
What it reports must hold at any number of seeds:

- **No spread.** Differences equal to within `RELATIVE_TOLERANCE` of the values' scale (float
  noise: 7.85e-17 between two accuracies is not a spread) get no p-value and no interval; the
  comparison says they are all equal (`Paired.equal_within`).
- **Few seeds.** Up to `EXACT_UP_TO` seeds the p-value is the exact two-sided sign-flip test on
  the differences (`sign_flip_test`), which assumes only that each difference is as likely
  positive as negative under no effect. It cannot go below 2 / 2^n (0.0625 at 5 seeds:
  `Paired.p_floor`), so no difference is detectable at p < 0.05 there and no MDE is given. From
  6 seeds on, Student's paired t test (n-1 df), whose p a few near-equal differences could drive
  to 0 if it were used below that; its 95 % interval stands beside either test.
- **The MDE** (the true mean difference detected with 80 % power by the t test) is omitted, with
  the reason (`Paired.mde_why`), where the test cannot reach the level or where it exceeds the
  metric's range (`span`: an accuracy difference cannot exceed ±1).
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
EXACT_UP_TO = 5  # seeds at which the exact sign-flip test gives the p; its floor 2/2^n is above 0.05 there
RELATIVE_TOLERANCE = 1e-9  # differences closer than this times the values' scale are equal
TESTS = {"t": "paired t test", "sign-flip": "exact sign-flip test"}
NOT_KEPT = "differences not kept"  # a stored comparison without its per-seed differences: no test can be redone


@dataclass
class Paired:
    """Arm minus baseline on the same seed, for one metric, with its test.

    `test` names what gave `p_value` (TESTS); `p_floor` is the smallest p that test can give with
    these seeds (exact test only); `p_t` is the paired t test's p whichever test gave `p_value`
    (a study registered on the t test reports it beside). `low`/`high` are the t interval; None with one seed or with
    every difference equal (`equal_within`: the tolerance they are equal within). `mde` is None
    where `mde_why` says why; `span` is the largest difference the metric can take, if bounded.
    `p_holm` is set by `adjust`, across the report's comparisons of the same metric.
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
    p_t: float | None = None

    @property
    def at_floor(self) -> bool:
        """Whether p is the smallest its test can give with these seeds."""
        return None not in (self.p_value, self.p_floor) and self.p_value <= self.p_floor * (1 + 1e-9)


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


def detectable(n: int, std: float, p_floor: float | None, span: float | None, tied: int = 0) -> tuple[float | None, str | None]:
    """The MDE, or None and why: the test cannot reach ALPHA, or the MDE exceeds the metric's range."""
    if p_floor is not None and p_floor >= ALPHA:
        floor = f"the exact test cannot go below {p_floor:.4g} with {n} seeds" + (f", {tied} tied" if tied else "")
        return None, f"no difference is detectable at p < {ALPHA:.2f}: {floor}"
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
    found.p_t = float(test.pvalue)
    if n <= EXACT_UP_TO:
        found.test, found.p_value = "sign-flip", sign_flip_test(d)
        found.p_floor = sign_flip_test(np.abs(d))
    else:
        found.p_value = float(test.pvalue)
    found.mde, found.mde_why = detectable(n, std, found.p_floor, span, ties)
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
