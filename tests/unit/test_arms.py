"""One vocabulary for the arms of a comparison of anchors (fedpfn.core.arms): the words the stored
results hold are the ones the commands read them by, and a federated run's `--anchor-masks` word for
the independent arm (`client`, which run folders' config.json keep) reads as that arm."""

from __future__ import annotations

import json
from pathlib import Path

from fedpfn.core.anchors import MASKS
from fedpfn.core.arms import ANCHORED, FUSED, GATE, INDEPENDENT, PLAIN, SHARED, arm_of_masks, masks_word
from fedpfn.experiments import cold, lmc_run

DOCS = Path(__file__).resolve().parents[2] / "docs"


def test_the_stored_results_hold_the_vocabularys_words():
    """A word changed here would leave every stored result unreadable: soups and ColD by their arms,
    the gate by its arms' kinds (`shared-0.4`: kind and ratio)."""
    assert list(json.loads((DOCS / "fusion" / "soup.json").read_text())["arms"]) == list(FUSED)
    assert list(json.loads((DOCS / "fusion" / "cold.json").read_text())["arms"]) == ["start", *FUSED]
    gate = json.loads((DOCS / "alignment" / "cells.json").read_text())
    names = {name for regime in gate.values() for seed in regime["seeds"].values() for name in seed}
    arms = lmc_run.arms_for(GATE, [0.4])
    assert {arm.name for arm in arms} <= names and [arm.kind for arm in arms] == list(GATE)


def test_a_federated_runs_masks_word_reads_as_its_arm():
    assert [arm_of_masks(word) for word in MASKS] == list(ANCHORED)
    assert masks_word(INDEPENDENT) == "client" and masks_word(SHARED) == "shared"
    assert arm_of_masks("independent") is None  # not a value --anchor-masks takes
    before, today = {"anchor_masks": "client"}, {"fedpfn.anchor_masks": "client"}  # a folder's config.json
    for config in (before, today):  # before the namespaces, and today's
        assert cold.arm_of({"algorithm": "fedpfn", **config}) == INDEPENDENT
    assert cold.arm_of({"algorithm": "fedavg"}) == PLAIN


def test_colds_runs_are_started_with_the_words_they_are_read_back_by():
    for arm in FUSED:
        flags = cold.run_flags(cold.ColdConfig(), arm, 0)
        masks = flags[flags.index("--anchor-masks") + 1] if "--anchor-masks" in flags else None
        algorithm = flags[flags.index("--algorithm") + 1]
        assert cold.arm_of({"algorithm": algorithm, "anchor_masks": masks}) == arm
