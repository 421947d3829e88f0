"""fedpfn.analysis.stats against references worked outside it: Holm by hand, the minimum
detectable effect against textbook sample sizes and a simulation, interpolation at a budget."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fedpfn.analysis.render import verdict
from fedpfn.analysis.stats import accuracy_at, holm, mde, paired, spent

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


def test_no_test_where_it_is_undefined() -> None:
    same = paired("fedpfn", "final", {0: 0.75, 1: 0.5}, {0: 0.5, 1: 0.25})  # +0.25 on both seeds
    assert (same.mean, same.low, same.high, same.p_value, same.mde) == (0.25, 0.25, 0.25, None, None)
    assert verdict(same) == "no test: every seed differs by the same amount"
    one = paired("fedpfn", "final", {0: 0.75}, {0: 0.5})
    assert (one.low, one.p_value, one.mde) == (None, None, None) and verdict(one) == "no test: 1 seed"


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
