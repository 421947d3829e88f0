"""The draw keys of the analysis commands: one registry, values as they were, no value taken twice."""

from enum import IntEnum

import pytest

from fedpfn.core.seeding import Draw, Stream, distinct

# The values each command's own `Draw` enum gave its keys before they moved into one registry:
# a key's value is mixed into every seed drawn with it, so a changed value changes the numbers.
BEFORE = {
    "LMC_TRAIN_POOL": 0, "LMC_BN_BATCHES": 1, "LMC_TEST_POOL": 2, "LMC_HELD_OUT": 3,
    "LMC_START_ORDER": 4, "LMC_TRAIN_EVAL": 5,
    "PRETRAIN_UPSTREAM_SHARE": 10, "PRETRAIN_UPSTREAM_HELD_OUT": 11,
    "SOUP_POOL": 20, "SOUP_GRID": 21, "SOUP_AUGMENT": 22, "SOUP_TEST": 23, "SOUP_BN": 24,
    "COLD_HEAD": 30, "COLD_SAMPLES": 31, "COLD_ORDER": 32, "COLD_TEST": 33,
}  # fmt: skip


def test_every_draw_key_keeps_the_value_it_had():
    assert {name: int(key) for name, key in Draw.__members__.items()} == BEFORE


def test_the_registry_and_the_streams_have_no_value_twice():
    assert len({int(key) for key in Draw}) == len(Draw.__members__)
    assert len({int(stream) for stream in Stream}) == len(Stream.__members__)


def test_a_key_that_repeats_a_value_is_refused_naming_both_keys():
    class Keys(IntEnum):
        FIRST = 40
        SECOND = 41
        THIRD = 40

    with pytest.raises(ValueError, match=r"^Keys\.THIRD = 40 repeats the value of Keys\.FIRST; each key"):
        distinct(Keys)


def test_an_enum_without_repeats_passes_unchanged():
    class Keys(IntEnum):
        FIRST = 40
        SECOND = 41

    assert distinct(Keys) is Keys
