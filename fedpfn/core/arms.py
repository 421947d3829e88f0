"""The arms of a comparison of anchors: one vocabulary for federated runs and the analysis commands.

- plain: no anchors (FedAvg, a plain fine-tune, a plain pair of models);
- shared: one anchor mask, the same for every client, ingredient or model of a pair (TNA-PFN);
- independent: each its own mask at the same ratio, the control (as much freezing, nothing shared);
- diff-init: models from different initialisations, the alignment gate's positive control.

A federated run of FedPFN says shared or independent by `--anchor-masks`, whose word for independent
is `client`: the word its run folders' config.json keeps (and so their fingerprints and default
folder names), so it stays, and `masks_word`/`arm_of_masks` translate.
"""

from __future__ import annotations

PLAIN, SHARED, INDEPENDENT, DIFF_INIT = "plain", "shared", "independent", "diff-init"
ANCHORED = (SHARED, INDEPENDENT)  # the arms with an anchor mask, and a ratio
FUSED = (PLAIN, SHARED, INDEPENDENT)  # what soups and ColD fusion compare
GATE = (*FUSED, DIFF_INIT)  # what the alignment gate (fedpfn align) compares, in its order
COMPARISONS = ((SHARED, PLAIN), (INDEPENDENT, PLAIN), (SHARED, INDEPENDENT))  # (arm, against), by seed
MASKS_WORDS = {SHARED: "shared", INDEPENDENT: "client"}  # an anchored arm: its `anchor_masks` value


def masks_word(arm: str) -> str:
    """`--anchor-masks`' value for an anchored arm (independent: `client`)."""
    return MASKS_WORDS[arm]


def arm_of_masks(word: object) -> str | None:
    """The anchored arm an `anchor_masks` value stands for; None for any other value."""
    return next((arm for arm, said in MASKS_WORDS.items() if said == word), None)
