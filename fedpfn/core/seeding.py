"""Every random stream of a run, derived from the run seed in one place.

A stream is named by its purpose and a few integers (a round, a partition id). numpy's
`SeedSequence` mixes them into independent seeds (hand-made hashes collided:
`(round, 10_007)` gave the seed of `(round + 1, 0)`), which do not depend on which process
or worker draws them, so a resumed run draws what an uninterrupted one would.

numpy generators use the whole sequence. A torch CPU generator keeps only the low 32 bits of
its seed, so two of its streams coincide with probability about n²/2³³ over n streams
(about 1 % for the 10⁴ (round, client) data orders of 100 clients over 100 rounds).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from enum import IntEnum
from typing import TYPE_CHECKING, TypeVar

import numpy as np

if TYPE_CHECKING:
    import torch

MAX_SEED = 2**32 - 1  # numpy's legacy range; larger run seeds are refused, not folded


E = TypeVar("E", bound=type[IntEnum])


def distinct(keys: E) -> E:
    """Refuse an enum in which two keys share a value: IntEnum would make the second an alias of the
    first, and two draws meant to be independent would silently draw the same numbers."""
    first: dict[int, str] = {}
    for name, member in keys.__members__.items():
        if name != member.name:  # an alias: its value was taken by an earlier key
            raise ValueError(
                f"{keys.__name__}.{name} = {int(member)} repeats the value of {keys.__name__}.{member.name}; "
                f"each key needs its own value (the values used: {sorted(first)})"
            )
        first[int(member)] = name
    return keys


@distinct
class Stream(IntEnum):
    """What a random stream is for; its value is part of every seed drawn for it."""

    PARTITION = 1  # which client holds which sample
    HOLDOUT = 2  # the validation samples held out of the training set
    INIT = 3  # the initial global model
    SAMPLING = 4  # (round) which clients train
    MASK = 5  # (round, or 0 for a fixed schedule) which entries are anchors
    DATA_ORDER = 6  # (round, partition) a client's minibatch order
    FAILURES = 7  # (round, partition) simulated client failures
    LOCAL_SPLIT = 8  # (partition) a client's local test samples
    ANALYSIS = 9  # (setting, model) the LMC analysis
    CLIENT_MASK = 10  # (round's anchor seed, partition) a client's own anchors (anchor_masks=client)
    ALIGNMENT = 11  # (round) which client models an alignment measurement interpolates
    EVALUATION = 12  # (round) which clients evaluate on their local test split (--evaluate-clients)
    DP_NOISE = 13  # (round) a server wrapper's noise (--server-wrap); (round, partition) a client mod's
    ATTACK = 14  # which partitions are malicious (--attack); (round, partition) a gaussian attacker's noise


@distinct
class Draw(IntEnum):
    """Every key of `Stream.ANALYSIS`, the analysis commands' own draws, in one place: a key's value is
    the first integer mixed into its seeds, so a changed value changes every number drawn with it, and
    a value taken twice would make two draws one. Values are grouped by command, in tens."""

    # lmc (fedpfn.experiments.lmc_run)
    LMC_TRAIN_POOL = 0  # (seed) the training samples the K models split
    LMC_BN_BATCHES = 1  # (seed) the batches BatchNorm statistics are recomputed on
    LMC_TEST_POOL = 2  # seed 0: the fixed test subset, the same for every seed
    LMC_HELD_OUT = 3  # (seed, k) model k's held-out samples
    LMC_START_ORDER = 4  # (seed) the shared start's batch order
    LMC_TRAIN_EVAL = 5  # (seed, k) the training samples a barrier on training data reads
    # pretrain (fedpfn.experiments.pretrain)
    PRETRAIN_UPSTREAM_SHARE = 10  # which samples of the upstream classes pretraining takes
    PRETRAIN_UPSTREAM_HELD_OUT = 11  # the upstream samples held out to measure pretraining
    # soup (fedpfn.experiments.soup_run)
    SOUP_POOL = 20  # the downstream samples: training subset and held-out split
    SOUP_GRID = 21  # which hyperparameters of the grid each ingredient takes
    SOUP_AUGMENT = 22  # (k) ingredient k's augmentation (flips and shifts)
    SOUP_TEST = 23  # seed 0: the fixed test subset, the same for every seed
    SOUP_BN = 24  # the batches BatchNorm statistics are recomputed on
    # cold (fedpfn.experiments.cold_eval)
    COLD_HEAD = 30  # (t) the fresh head of held-out task t
    COLD_SAMPLES = 31  # (t) which validation samples task t's probe fits on
    COLD_ORDER = 32  # (t) the probe's batch order
    COLD_TEST = 33  # seed 0: the fixed test images, the same for every seed


def sequence(run_seed: int, stream: Stream, *keys: int) -> np.random.SeedSequence:
    if not 0 <= run_seed <= MAX_SEED:
        raise ValueError(f"seed {run_seed} must be in [0, {MAX_SEED}]")
    return np.random.SeedSequence([int(run_seed), int(stream), *(int(k) for k in keys)])


def seed_for(run_seed: int, stream: Stream, *keys: int) -> int:
    """A 63-bit integer seed: what a message carries and what torch.Generator takes."""
    return int(sequence(run_seed, stream, *keys).generate_state(1, np.uint64)[0] >> np.uint64(1))


def numpy_rng(run_seed: int, stream: Stream, *keys: int) -> np.random.Generator:
    return np.random.default_rng(sequence(run_seed, stream, *keys))


def torch_generator(run_seed: int, stream: Stream, *keys: int) -> torch.Generator:
    """A CPU generator: draws are the same on every machine, whatever device trains."""
    import torch

    return torch.Generator().manual_seed(seed_for(run_seed, stream, *keys))


@contextmanager
def numpy_global(run_seed: int, stream: Stream, *keys: int) -> Iterator[None]:
    """NumPy's global generator seeded for the block, and as it was after: for code of others that
    draws there (Flower's DP wrappers and mods add their noise with np.random.normal)."""
    outer = np.random.get_state()
    np.random.seed(int(sequence(run_seed, stream, *keys).generate_state(1)[0]))
    try:
        yield
    finally:
        np.random.set_state(outer)
