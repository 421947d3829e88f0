"""A paired comparison in words, the same on every page: its p, what its interval excludes, its verdict.

The p is never printed as 0 (below the last digit shown it reads '< 0.001'), and an exact test's
p at its floor says so ('0.0625, the smallest 5 seeds can give'). A detectable difference is
shown only where the test can reach its level and the difference fits the metric's range.
"""

from __future__ import annotations

from fedpfn.analysis.inference import ALPHA, NOT_KEPT, POWER, Paired, std_factors


def size_text(value: float, signed: bool = False) -> str:
    """Hundredths, or two significant digits below 0.1 (a barrier's hundredths of a nat)."""
    sign = "+" if signed else ""
    return f"{value:{sign}.2f}" if abs(value) >= 0.1 else f"{value:{sign}.2g}"


def p_number(value: float | None, digits: str = ".3f") -> str:
    """A p-value as `digits` formats it, 'n/a' for none, '< 0.001' where it would print as 0."""
    if value is None:
        return "n/a"
    text = f"{value:{digits}}"
    if float(text) == 0:
        places = int(digits.strip(".f")) if digits.endswith("f") else 3
        return f"< {10.0**-places:.{places}f}"
    return text


def p_text(p: Paired, digits: str = ".3f") -> str:
    """The comparison's p (`p_number`), with the floor named where an exact test's p is at it."""
    if not p.at_floor:
        return p_number(p.p_value, digits)
    tied = f" with {p.ties} tied" if p.ties else ""
    return f"{p.p_value:.4g}, the smallest {len(p.seeds)} seeds can give{tied}"  # 0.0625, not 0.062


def excluded(p: Paired, scale: float = 100.0, unit: str = "points") -> str:
    """What the 95 % interval rules out: the statement of a difference that is not resolved
    (accuracy as gains and losses; other figures, such as a barrier, as differences)."""
    assert p.low is not None and p.high is not None
    low, high = size_text(scale * p.low, signed=True), size_text(scale * p.high, signed=True)
    if p.low < 0 < p.high:
        above, below = ("gains", "losses") if unit == "points" else ("differences", "")
        return f"the 95 % CI excludes {above} above {high} and {below + ' ' if below else ''}below {low} {unit}"
    return f"the 95 % CI excludes differences below {low} and above {high} {unit}"


def detectable_text(p: Paired, scale: float, unit: str) -> str:
    """The MDE with its range over the std's 95 % interval (capped at the metric's span), or why none."""
    if p.mde is None:
        return p.mde_why or "no detectable difference computed"
    factors = std_factors(len(p.seeds))
    assert factors is not None  # an mde has 2 seeds or more
    low, high = (p.mde * f for f in factors)
    top = f"±{size_text(scale * high)}"
    if p.span is not None and high > p.span:
        top = f"±{size_text(scale * p.span)}, the metric's range,"
    return (
        f"detectable at {100 * POWER:g} % power: ±{size_text(scale * p.mde)} {unit} "
        f"(±{size_text(scale * low)} to {top} over the std's 95 % interval)"
    )


def no_test(p: Paired, scale: float, unit: str) -> str:
    """Why a comparison has no test: one seed, or every difference the same."""
    if p.test == NOT_KEPT:
        return "no test: its per-seed differences were not kept, and a test needs them"
    if p.std is None:
        return "no test: 1 seed"
    if p.equal_within is not None:
        each = size_text(scale * p.mean, signed=True)
        if p.equal_within == 0:  # every value exactly the same, so no scale to measure "equal" by
            return f"no test: all {len(p.diffs)} differences are exactly {each} {unit}"
        return (
            f"no test: all {len(p.diffs)} differences equal ({each} {unit}) to within "
            f"{scale * p.equal_within:.0e} {unit}"
        )
    return "no test: every seed differs by the same amount"


def verdict(p: Paired, scale: float = 100.0, unit: str = "points") -> str:
    """What the comparison supports after Holm's adjustment. A 'not resolved' says what its 95 %
    interval excludes, then the difference these seeds could have detected (`detectable_text`),
    as `scale` × the difference in `unit` (accuracy: 100 × a fraction, in points)."""
    if p.p_value is None or p.p_holm is None or p.low is None or p.high is None:
        return no_test(p, scale, unit)
    if p.p_holm < ALPHA:
        return "higher" if p.mean > 0 else "lower"
    after = " after Holm" if p.p_value < ALPHA else ""
    return f"not resolved{after}; {excluded(p, scale, unit)}; {detectable_text(p, scale, unit)}"


def test_note(comparisons: list[Paired]) -> str:
    """Which test gave the p-values: Student's t, or with few seeds the exact test and its floor."""
    exact = sorted({len(p.seeds) for p in comparisons if p.test == "sign-flip"})
    if not exact:
        return "p: Student's paired t test (n − 1 df), the test of its 95 % interval."
    floors = ", ".join(f"{2 / 2**n:.4g} with {n} seeds" for n in exact)
    return (
        "p: the exact sign-flip test on the per-seed differences, which cannot go below 2/2^n "
        f"({floors}); the 95 % interval beside it is Student's t."
    )


def mde_notes(comparisons: list[Paired]) -> list[str]:
    """Why a comparison has no MDE, once per reason (the tables' '–')."""
    reasons = dict.fromkeys(p.mde_why for p in comparisons if p.mde is None and p.mde_why)
    return ["", f"MDE –: {'; '.join(reasons)}."] if reasons else []
