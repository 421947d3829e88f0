"""fedpfn.analysis.stats against references worked outside it: Holm by hand, the minimum
detectable effect against textbook sample sizes and a simulation, interpolation at a budget."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fedpfn.analysis.inference import adjust, sign_flip_test
from fedpfn.analysis.paired_text import floors_text, p_number, p_text
from fedpfn.analysis.render import comparison_cells, verdict
from fedpfn.analysis.stats import Paired, accuracy_at, holm, mde, paired, sign_test, spent, std_factors

T_975_4DF = 2.7764451051977934  # Student's t, 0.975 quantile, 4 degrees of freedom (printed tables: 2.776)


def test_holm_matches_a_hand_worked_example() -> None:
    # sorted: 0.005 x 4 = 0.02, 0.01 x 3 = 0.03, 0.03 x 2 = 0.06, 0.04 x 1 = 0.04 -> kept at 0.06
    assert holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert holm([0.2, None, 0.01]) == [pytest.approx(0.2), None, pytest.approx(0.02)]  # no test: not counted
    assert holm([0.6, 0.7]) == [1.0, 1.0]  # capped at 1
    assert holm([]) == []


def test_mde_matches_the_textbook_sample_sizes() -> None:
    """Cohen (1988), G*Power: a paired t test at two-sided 0.05 reaches 80 % power with n = 10 at
    dz = 1 (power 0.803) and n = 34 at dz = 0.5 (0.808); one seed fewer falls short."""
    assert mde(10, 1.0) < 1.0 < mde(9, 1.0)
    assert mde(34, 1.0) < 0.5 < mde(33, 1.0)
    assert mde(5, 0.02) == pytest.approx(2 * mde(5, 0.01))  # in units of the std
    assert mde(1, 0.01) is None and mde(5, 0.0) is None and mde(5, None) is None


def test_the_mde_is_detected_four_times_in_five_in_simulation() -> None:
    """40,000 studies of 5 seeds whose true mean difference is the MDE: the paired t test at
    two-sided 0.05 rejects in 80 % of them (within 5 standard errors)."""
    n, std = 5, 0.02
    diffs = np.random.default_rng(0).normal(mde(n, std), std, size=(40_000, n))
    t = diffs.mean(axis=1) / (diffs.std(axis=1, ddof=1) / math.sqrt(n))
    assert np.mean(np.abs(t) > T_975_4DF) == pytest.approx(0.80, abs=0.01)


def test_the_std_of_five_seeds_is_known_within_a_factor_of_0_6_to_2_9() -> None:
    """Printed chi-square tables, 4 df: 0.484 (2.5 %) and 11.143 (97.5 %); and in simulation the
    interval [s x low, s x high] holds the true std in 95 % of 5-value samples."""
    low, high = std_factors(5)
    assert (low, high) == pytest.approx((math.sqrt(4 / 11.143), math.sqrt(4 / 0.4844)), rel=1e-3)
    assert (round(low, 2), round(high, 2)) == (0.6, 2.87)
    s = np.random.default_rng(1).normal(0.0, 1.0, size=(20_000, 5)).std(axis=1, ddof=1)
    assert np.mean((s * low <= 1.0) & (1.0 <= s * high)) == pytest.approx(0.95, abs=0.01)
    assert std_factors(1) is None and std_factors(50)[1] < 1.3  # more seeds: a tighter std


def test_the_sign_test_is_exact_and_ignores_ties() -> None:
    assert sign_test([0.1, 0.2, 0.01, 0.3, 0.02]) == pytest.approx(0.0625)  # 5 of 5: 2 x 1/32
    assert sign_test([-0.1, -0.2, -0.01, -0.3, -0.02]) == pytest.approx(0.0625)
    assert sign_test([0.1, 0.2, -0.01, 0.3, 0.02]) == pytest.approx(0.375)  # 4 of 5: 2 x 6/32
    assert sign_test([0.1, 0.0, -0.1]) == pytest.approx(1.0) and sign_test([0.0, 0.0]) is None


def not_resolved(low: float, high: float, p: float, holm_p: float, mde_: float) -> Paired:
    mean = (low + high) / 2
    return Paired("fedpfn", "lastk", [0, 1, 2, 3, 4], [mean] * 5, mean, 0.01, low, high, p, mde_, 3, 0, holm_p)


def test_a_difference_not_resolved_says_what_its_interval_excludes() -> None:
    """The interval is the statement; the MDE beside it is ranged over the std's 95 % interval."""
    both = not_resolved(-0.0026, 0.0024, 0.9, 0.9, 0.0034)
    assert verdict(both) == (
        "not resolved; the 95 % CI excludes gains above +0.24 and losses below -0.26 points; "
        "detectable at 80 % power: ±0.34 points (±0.20 to ±0.98 over the std's 95 % interval)"
    )
    below = not_resolved(-0.0051, -0.0006, 0.024, 0.094, 0.003)  # under 0.05 alone, not after Holm
    assert verdict(below).startswith(
        "not resolved after Holm (the interval excludes 0, the family's correction does not); the 95 % CI excludes "
        "differences below -0.51 and above -0.06 points;"
    )
    barrier = not_resolved(-0.012, 0.03, 0.4, 0.8, 0.02)  # a loss barrier, in nats
    assert verdict(barrier, 1.0, "nats").startswith(
        "not resolved; the 95 % CI excludes differences above +0.03 and below -0.012 nats; "
        "detectable at 80 % power: ±0.02 nats (±0.012 to ±0.057"
    )
    assert verdict(not_resolved(0.001, 0.002, 0.001, 0.003, 0.001)) == "higher"


def test_no_test_where_it_is_undefined() -> None:
    same = paired("fedpfn", "final", {0: 0.75, 1: 0.5}, {0: 0.5, 1: 0.25})  # +0.25 on both seeds
    assert (same.mean, same.low, same.high, same.p_value, same.mde) == (0.25, None, None, None, None)
    assert verdict(same) == "no test: all 2 differences equal (+25.00 points) to within 8e-08 points"
    one = paired("fedpfn", "final", {0: 0.75}, {0: 0.5})
    assert (one.low, one.p_value, one.mde) == (None, None, None) and verdict(one) == "no test: 1 seed"


def comparison_of(arm: dict[int, float], base: dict[int, float], span: float | None = 1.0) -> Paired:
    """`paired` with its Holm p set (a family of one), for accuracies unless `span` says otherwise."""
    found = paired("fedpfn", "lastk", arm, base, span)
    adjust([found])
    return found


def test_differences_equal_up_to_float_noise_have_no_test() -> None:
    """Two accuracies' differences 7.85e-17 apart once read p = 0.000 with an interval of zero width."""
    noise = comparison_of({0: 0.8, 1: 0.7}, {0: 0.5, 1: 0.4})
    assert noise.std == pytest.approx(7.85e-17, rel=0.01) and noise.equal_within is not None
    assert (noise.low, noise.high, noise.p_value, noise.p_holm, noise.mde) == (None,) * 5
    assert verdict(noise).startswith("no test: all 2 differences equal (+30.00 points) to within")
    assert p_text(noise) == "n/a" and comparison_cells(noise).split(" | ")[1:3] == ["n/a", "n/a"]
    spread = comparison_of({0: 0.8, 1: 0.7}, {0: 0.5, 1: 0.4 + 1e-6})  # a real, if tiny, spread is tested
    assert spread.equal_within is None and spread.p_value is not None


def test_a_clear_effect_at_ten_seeds_is_resolved_by_the_t_test() -> None:
    rng = np.random.default_rng(3)
    base = {s: 0.8 + 0.01 * rng.normal() for s in range(10)}
    arm = {s: base[s] + 0.02 + 0.005 * rng.normal() for s in range(10)}
    found = comparison_of(arm, base)
    assert found.test == "t" and found.p_value < 1e-4 and 0 < found.low < 0.02 < found.high
    assert verdict(found) == "higher" and p_text(found) == "< 0.001 (exact 0.001953, the smallest 10 seeds can give)"


@pytest.mark.parametrize("n", [2, 3, 4, 5])
def test_few_seeds_are_decided_by_the_t_test_with_the_exact_floor_beside(n: int) -> None:
    """However clear the effect, the exact test cannot give p below 2 / 2^n: it stands beside the
    t test with its floor said, and the t test, whose interval is printed, decides (+20 points on 3
    seeds once read 'not resolved' beside an interval far above 0)."""
    base = {s: 0.5 + 0.01 * s for s in range(n)}
    arm = {s: base[s] + 0.2 + 1e-4 * s for s in range(n)}  # +20 points, nearly no spread
    found = comparison_of(arm, base)
    assert found.test == "t" and found.p_exact == pytest.approx(2 / 2**n) == found.p_floor and found.at_floor
    assert found.low is not None and found.low > 0 and found.p_holm is not None and found.p_holm < 0.05
    assert p_text(found).endswith(f" (exact {2 / 2**n:.4g}, the smallest {n} seeds can give)")
    assert verdict(found) == "higher" and found.mde is not None
    assert floors_text([found]) == f"{n} seeds: no distribution-free test can go below {2 / 2**n:.4g}"


def test_the_exact_test_is_the_sign_flip_enumeration() -> None:
    assert sign_flip_test([0.1, 0.2, 0.3, 0.4, 0.5]) == pytest.approx(2 / 32)
    assert sign_flip_test([0.1, -0.2, 0.3, 0.4, 0.5]) == pytest.approx(6 / 32)  # |sum| >= 1.1: ±0.1 and ±0.2 flips
    assert sign_flip_test([0.0, 0.1, 0.1]) == pytest.approx(0.5)  # a zero difference flips to itself


def test_the_mde_never_exceeds_the_metrics_range() -> None:
    """Accuracy differences of ±90 points on six seeds once read 'detectable: ±141 points'."""
    swing = {s: 0.95 if s % 2 else 0.05 for s in range(6)}
    wide = comparison_of(swing, {s: 1 - swing[s] for s in range(6)})
    assert wide.mde is None and "no difference the metric can take is detectable" in verdict(wide)
    middling = comparison_of({s: 0.5 + (0.3 if s % 2 else -0.3) for s in range(6)}, dict.fromkeys(range(6), 0.5))
    assert middling.mde is not None and middling.mde < 1.0
    assert "±100.00, the metric's range, over the std's 95 % interval" in verdict(middling)
    nats = comparison_of({s: 3.0 * (1 if s % 2 else -1) for s in range(6)}, dict.fromkeys(range(6), 0.0), None)
    assert nats.mde is not None and nats.mde > 1.0  # a loss has no such range


def test_a_difference_is_arm_minus_baseline() -> None:
    lower = comparison_of({s: 0.7 + 0.001 * s**2 for s in range(8)}, {s: 0.8 for s in range(8)})
    assert lower.mean < 0 and lower.wins == 0 and all(d < 0 for d in lower.diffs) and verdict(lower) == "lower"


def test_a_p_value_never_prints_as_zero() -> None:
    assert p_number(0.0) == "< 0.001" and p_number(1e-300, ".4f") == "< 0.0001" and p_number(0.0, ".3g") != "0"
    assert p_number(0.0421) == "0.042" and p_number(None) == "n/a"


def test_accuracy_at_a_budget_is_linear_between_evaluated_rounds() -> None:
    accuracies = [0.2, None, 0.6, 0.7, 0.9]  # round 2 not evaluated
    uploads = [10, 10, 0, 0, 20]  # rounds 3 and 4 sent nothing: cumulative 10, 20, 20, 20, 40
    rows = [
        {"round": r, "test_accuracy": acc, "bytes_up": up, "bytes_down": 1}
        for r, (acc, up) in enumerate(zip(accuracies, uploads), 1)
    ]
    sent = spent(rows, "up")
    assert sent.tolist() == [10, 20, 20, 20, 40] and spent(rows, "up_down").tolist() == [11, 22, 23, 24, 45]
    assert accuracy_at(20, rows, sent) == pytest.approx(0.7)  # the latest model 20 bytes paid for (round 4)
    assert accuracy_at(15, rows, sent) == pytest.approx(0.45)  # halfway from round 1 to round 4
    assert accuracy_at(30, rows, sent) == pytest.approx(0.8)
    assert accuracy_at(40, rows, sent) == pytest.approx(0.9)
    assert accuracy_at(5, rows, sent) is None  # before the first evaluated round


def test_a_page_published_under_the_former_rule_lists_the_verdicts_the_rule_turned() -> None:
    """Krum − FedAvg's +65 points on 3 seeds read 'not resolved' while the exact test decided up to 5 seeds:
    its page lists it with the reason; a verdict the rule did not turn lists nothing (a page written since
    does not ask: its study file has no `changed_verdicts`, tests/studies/test_study_pages.py)."""
    from fedpfn.analysis.paired_text import CHANGED, changed_section, verdicts_printed

    krum = comparison_of({s: 0.7 + 0.01 * s for s in range(3)}, {s: 0.05 + 0.02 * s for s in range(3)})
    ten = comparison_of({s: 0.7 + 0.01 * (s % 3) for s in range(10)}, {s: 0.05 for s in range(10)})
    unresolved = comparison_of({0: 0.5, 1: 0.6, 2: 0.4}, {0: 0.55, 1: 0.5, 2: 0.45})
    with verdicts_printed() as seen:
        said = [verdict(p) for p in (krum, ten, unresolved, krum)]
    assert said[:2] == ["higher", "higher"] and said[2].startswith("not resolved")
    page = changed_section(seen)
    assert page.startswith(f"\n{CHANGED}\n") and page.count("\n- ") == 1  # printed twice, listed once; 10 seeds: unchanged
    assert f"- fedpfn (lastk): now higher (+{100 * krum.mean:.2f} points, 95 % CI [+" in page
    assert "it read 'not resolved' while the exact test decided up to 5 seeds, and with 3 seeds that test cannot go below 0.25." in page
    with verdicts_printed() as unturned:
        verdict(ten)
    assert changed_section(unturned) == ""
    verdict(krum)  # outside a page: nothing is collected
    assert len(seen) == 3
