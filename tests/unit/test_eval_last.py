"""--eval-last N: the global model evaluated in each of the last N rounds whatever --eval-every says,
so an endpoint that averages the last N rounds costs N evaluations, not one a round; at 0 (the
default) a run evaluates as before and its config.json is unchanged, and a negative N is refused."""

from __future__ import annotations

import pytest

from fedpfn.core.concerns import Evaluation
from fedpfn.core.config import ConfigError
from fedpfn.runtime.algorithms import load_config


@pytest.mark.parametrize(("every", "last", "evaluated"), [
    (10, 10, [*range(10, 300, 10), *range(291, 301)]),
    (10, 0, list(range(10, 301, 10))),
    (7, 0, [*range(7, 300, 7), 300]),  # the last round always
    (7, 3, [*range(7, 298, 7), 298, 299, 300]),
    (1, 5, list(range(1, 301))),
])  # fmt: skip
def test_the_rounds_evaluated(every: int, last: int, evaluated: list[int]) -> None:
    evaluation = Evaluation(eval_every=every, eval_last=last)
    assert [r for r in range(1, 301) if evaluation.evaluates(r, 300)] == sorted(set(evaluated))


def test_at_zero_the_config_is_as_before_and_otherwise_it_is_kept() -> None:
    assert "eval_last" not in load_config({}).to_dict()  # a folder written before the setting is reused
    assert load_config({"eval_last": 10}).to_dict()["eval_last"] == 10


def test_a_negative_count_is_refused_in_one_line() -> None:
    with pytest.raises(ConfigError) as raised:
        load_config({"eval_last": -1})
    assert "eval_last" in str(raised.value) and "\n" not in str(raised.value)
