"""A paired comparison in words, the same on every page: its p, what its interval excludes, its verdict.

The verdict is the one rule's (fedpfn.analysis.inference.decided: the family's Holm-adjusted t
test, whose interval is printed beside). The p is never printed as 0 (below the last digit shown
it reads '< 0.001'); the exact sign-flip test stands beside it as a check, and at its floor says
so ('exact 0.25, the smallest 3 seeds can give'). A detectable difference is shown only where it
fits the metric's range. `changed_lines` lists the verdicts the rule of 2026-12-07 turned.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from fedpfn.analysis.inference import ALPHA, FORMER_EXACT_UP_TO, NOT_KEPT, POWER, Paired, changed_by_rule, decided, std_factors


Printed = dict[tuple[str, str, float], tuple[Paired, float, str]]
_PRINTED: ContextVar[Printed | None] = ContextVar("printed", default=None)


@contextmanager
def verdicts_printed() -> Iterator[Printed]:
    """Every comparison whose verdict is printed while the block runs (one page's), with its scale
    and unit: what `changed_section` reads, so no page lists its comparisons a second time."""
    seen: Printed = {}
    token = _PRINTED.set(seen)
    try:
        yield seen
    finally:
        _PRINTED.reset(token)


def printed(p: Paired, scale: float, unit: str) -> None:
    """Note that `p`'s verdict is on the page being written (nothing outside `verdicts_printed`)."""
    seen = _PRINTED.get()
    if seen is not None:
        seen.setdefault((p.label, p.metric, p.mean), (p, scale, unit))


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


def exact_text(p: Paired) -> str:
    """The exact sign-flip test's p, with its floor named where it is at it ('' where not computed)."""
    if p.p_exact is None:
        return ""
    if not p.at_floor:
        return f"exact {p.p_exact:.4g}"
    tied = f" with {p.ties} tied" if p.ties else ""
    return f"exact {p.p_exact:.4g}, the smallest {len(p.seeds)} seeds can give{tied}"  # 0.0625, not 0.062


def p_text(p: Paired, digits: str = ".3f") -> str:
    """The t test's p (`p_number`), the exact test's beside it in brackets."""
    exact = exact_text(p) if p.p_value is not None else ""
    return p_number(p.p_value, digits) + (f" ({exact})" if exact else "")


def excluded(p: Paired, scale: float = 100.0, unit: str = "points") -> str:
    """What the 95 % interval rules out: the statement of a difference that is not resolved
    (accuracy as gains and losses; other figures, such as a barrier, as differences)."""
    assert p.low is not None and p.high is not None
    low, high = size_text(scale * p.low, signed=True), size_text(scale * p.high, signed=True)
    if p.low < 0 < p.high:
        above, below = ("gains", "losses") if unit == "points" else ("differences", "")
        return f"the 95 % CI excludes {above} above {high} and {below + ' ' if below else ''}below {low} {unit}"
    return f"the 95 % CI excludes differences below {low} and above {high} {unit}"


def mde_range(p: Paired, scale: float) -> tuple[str, str, str]:
    """The MDE, and its range over the std's 95 % interval, the top capped at the metric's span
    (then said so), as printed; for a comparison with an MDE."""
    assert p.mde is not None
    factors = std_factors(len(p.seeds))
    assert factors is not None  # an mde has 2 seeds or more
    low, high = (p.mde * f for f in factors)
    top = f"±{size_text(scale * high)}"
    if p.span is not None and high > p.span:
        top = f"±{size_text(scale * p.span)}, the metric's range,"
    return f"±{size_text(scale * p.mde)}", f"±{size_text(scale * low)}", top


def detectable_text(p: Paired, scale: float, unit: str) -> str:
    """The MDE with its range over the std's 95 % interval (capped at the metric's span), or why none."""
    if p.mde is None:
        return p.mde_why or "no detectable difference computed"
    mde, low, top = mde_range(p, scale)
    return f"detectable at {100 * POWER:g} % power: {mde} {unit} ({low} to {top} over the std's 95 % interval)"


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
    printed(p, scale, unit)
    if p.p_value is None or p.p_holm is None or p.low is None or p.high is None:
        return no_test(p, scale, unit)
    if decided(p):
        return "higher" if p.mean > 0 else "lower"
    after = " after Holm (the interval excludes 0, the family's correction does not)" if p.p_value < ALPHA else ""
    return f"not resolved{after}; {excluded(p, scale, unit)}; {detectable_text(p, scale, unit)}"


def verdict_cell(p: Paired, scale: float = 100.0, unit: str = "points") -> str:
    """`verdict` in a table's cell: higher, lower, not resolved (after Holm) with its MDE and range,
    or why there is no test; what its words mean is said once beside the table (`VERDICT_KEY`), and
    what the interval rules out is the 95 % CI beside it."""
    if p.p_value is None or p.p_holm is None or p.low is None or p.high is None or decided(p):
        return verdict(p, scale, unit)
    printed(p, scale, unit)
    after = " after Holm" if p.p_value < ALPHA else ""
    if p.mde is None:
        return f"not resolved{after}; {p.mde_why or 'no MDE computed'}"
    mde, low, top = mde_range(p, scale)
    return f"not resolved{after}; MDE {mde} ({low} to {top.removesuffix(',')})"


VERDICT_KEY = (
    f"Verdict: *higher* or *lower* where p (Holm) < {ALPHA:g}; *not resolved* where not, its 95 % CI being what "
    "it rules out; *after Holm* where that interval excludes 0 and the family's correction does not. MDE: the "
    f"difference these seeds would detect at {100 * POWER:g} % power before Holm, in the table's unit, and in "
    "brackets its range over the 95 % interval of the differences' std."
)


def floors_text(comparisons: list[Paired]) -> str:
    """'3 seeds: no distribution-free test can go below 0.25', once per number of seeds where that
    floor is not below ALPHA ('' where none is)."""
    small = sorted({len(p.seeds) for p in comparisons if p.p_floor is not None and 2 / 2 ** len(p.seeds) >= ALPHA})
    return "; ".join(f"{n} seeds: no distribution-free test can go below {2 / 2**n:.4g}" for n in small)


def test_note(comparisons: list[Paired]) -> str:
    """The decision rule, once: the t test of the interval decides, the exact test stands beside."""
    floors = floors_text(comparisons)
    return (
        "p: Student's paired t test (n − 1 df), the test of its 95 % interval, which decides; in brackets the "
        "exact sign-flip test on the per-seed differences, a distribution-free check that cannot go below 2/2^n"
        + (f" ({floors})." if floors else ".")
    )


CHANGED = "## Verdicts changed by the one decision rule (2026-12-07)"
def changed_section(seen: Printed) -> str:
    """The closing list, for a page published under the former rule (a study's `changed_verdicts`),
    of the verdicts the rule of 2026-12-07 turned (`changed_by_rule`), each with its reason; ''
    where none did."""
    lines = [
        f"- {p.label} ({p.metric}): now {verdict(p, scale, unit)} ({size_text(scale * p.mean, signed=True)} {unit}, 95 % CI "
        f"[{size_text(scale * p.low, signed=True)}, {size_text(scale * p.high, signed=True)}], t test p Holm "
        f"{p_number(p.p_holm, '.4f')}); it read 'not resolved' while the exact test decided up to {FORMER_EXACT_UP_TO} "
        f"seeds, and with {len(p.seeds)} seeds that test cannot go below {2 / 2 ** len(p.seeds):.4g}."
        for p, scale, unit in seen.values()
        if changed_by_rule(p) and p.low is not None and p.high is not None
    ]
    if not lines:
        return ""
    lead = ("Each comparison is now decided by the t test whose 95 % interval it prints (a study that registered the "
            "t test, or none: fedpfn/analysis/inference.py), the exact sign-flip test standing beside as a check. "
            "These verdicts changed with that rule:")  # fmt: skip
    return "\n".join(["", CHANGED, "", lead, "", *lines]) + "\n"


def mde_notes(comparisons: list[Paired]) -> list[str]:
    """Why a comparison has no MDE, once per reason (the tables' '–')."""
    reasons = dict.fromkeys(p.mde_why for p in comparisons if p.mde is None and p.mde_why)
    return ["", f"MDE –: {'; '.join(reasons)}."] if reasons else []
