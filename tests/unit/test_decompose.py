"""Freezing or sharing: the split reads 0 where nothing differs, moves where one part does, and
keeps its sign (an arm above its reference is positive)."""

from __future__ import annotations

import numpy as np
import pytest

from fedpfn.analysis.decompose import split
from fedpfn.analysis.inference import adjust_together

SEEDS = range(10)


def noisy(base: float, seed: int, size: float = 0.01) -> dict[int, float]:
    rng = np.random.default_rng(seed)
    return {s: base + size * float(rng.standard_normal()) for s in SEEDS}


def test_arms_that_do_not_differ_read_zero_and_get_no_share() -> None:
    same = noisy(0.3, 0)
    found = split("r", "P", same, dict(same), dict(same))
    for part in found.parts:
        assert part.mean == 0.0 and part.p_value is None and part.equal_within is not None
    assert found.share(found.freezing) is None  # the whole is not resolved: no ratio


def test_an_effect_of_freezing_alone_is_given_to_freezing() -> None:
    plain, frozen = noisy(0.30, 1), noisy(0.10, 2)
    shared = {s: v + 0.002 * (-1) ** s for s, v in frozen.items()}  # as frozen, not lower
    found = split("r", "P", plain, frozen, shared)
    assert found.freezing.high < 0 and found.whole.high < 0  # both lower than plain: negative
    assert found.sharing.low < 0 < found.sharing.high  # sharing not resolved
    assert found.share(found.freezing) is None  # before its family is adjusted nothing is resolved
    adjust_together(found.parts)
    assert found.share(found.freezing) == pytest.approx(1.0, abs=0.05) and found.share_text(found.freezing) == "100 %"
    for s in SEEDS:  # whole = freezing + sharing, seed by seed
        k = found.whole.seeds.index(s)
        assert found.whole.diffs[k] == pytest.approx(found.freezing.diffs[k] + found.sharing.diffs[k])


def test_an_effect_of_sharing_alone_is_given_to_sharing() -> None:
    plain = noisy(0.30, 3)
    independent = {s: v + 0.001 * (-1) ** s for s, v in plain.items()}
    shared = {s: v - 0.2 for s, v in noisy(0.30, 4).items()}
    found = split("r", "P", plain, independent, shared)
    assert found.sharing.high < 0 and found.freezing.low < 0 < found.freezing.high
    adjust_together(found.parts)
    assert found.share(found.sharing) == pytest.approx(1.0, abs=0.05)


def test_a_whole_resolved_before_holm_alone_gets_no_share() -> None:
    """The whole's interval excludes 0, but its declared family's Holm p does not resolve it: 'not
    resolved', not a share (decompose once printed one wherever the unadjusted interval excluded 0)."""
    plain, frozen = noisy(0.30, 1), noisy(0.10, 2)
    found = split("r", "P", plain, frozen, frozen)
    adjust_together(found.parts)
    assert found.whole.high < 0 and found.share_text(found.freezing) == "100 %"
    found.whole.p_holm = 0.2  # as a larger family's correction would leave it
    assert found.whole.high < 0 and found.share(found.freezing) is None
    assert found.share_text(found.freezing) == "not resolved"


def test_only_seeds_every_arm_has_are_compared() -> None:
    plain, independent, shared = noisy(0.3, 5), noisy(0.2, 6), noisy(0.1, 7)
    del shared[9]
    assert split("r", "P", plain, independent, shared).freezing.seeds == list(range(9))


def test_a_family_is_adjusted_across_its_metrics() -> None:
    a = split("r", "P", noisy(0.3, 8), noisy(0.2, 9), noisy(0.1, 10))
    b = split("r", "acc", noisy(0.8, 11), noisy(0.8, 12), noisy(0.9, 13))
    tested = adjust_together([*a.parts, *b.parts])
    assert tested == 6
    smallest = min(a.parts + b.parts, key=lambda p: p.p_value)
    assert smallest.p_holm == pytest.approx(min(1.0, 6 * smallest.p_value))
