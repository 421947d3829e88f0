"""How aligned a round's client models are, measured while the federation trains.

TNA-PFN's claim is about alignment: clients that share anchors stay aligned, so their average
loses less. Every `alignment_every` rounds the server measures, with the instruments of
`fedpfn.analysis.fusion`:

- the retained fraction R = sum_k n_k [L(w_r; D_k) - L(w_bar; D_k)] / sum_k n_k [L(w_r; D_k) - L(w_k; D_k)]
  over the round's clients k: the share of the clients' local gains that survives aggregation
  (w_r the round's global model, w_k client k's trained model, w_bar the server's actual
  aggregate, D_k the client's held-out local split, n_k its examples). 1: aggregation kept
  every local gain; 0: it kept none; negative: the aggregate is worse than the start on the
  clients' own data. Normalised and unclamped, so smaller local steps do not look better.
  Needs `local_test_fraction` > 0.
- between every pair of the round's first `alignment_clients` clients (partition order): the
  signed loss barrier and the midpoint's excess, and after weight matching the
  permutation-attributable loss P and the fraction of units matching moves (the matched curve
  is left to `fedpfn align`: here every point costs a measured round time). Measured on
  the union of the pair's held-out local data when clients hold one, else on a seeded subset of
  the server's evaluation set; `align_measured_on` says which.
- every client k of the round against the round's aggregate w_bar
  (`align_client_<figure>_<matcher>`, lists in the order of `align_client_partitions`): the
  distance ||w_k - w_bar|| over the parameters, and after matching w_k onto w_bar P_k =
  L(avg(w_bar, w_k)) - L(avg(w_bar, pi(w_k))), the signed loss barrier of the matched line, the
  fraction of units moved, ||pi(w_k) - w_bar|| and whether the descent converged, under each of
  MATCHERS: `full` (weight matching on the full weights) and `changes` (on w_k - w_r and w_bar -
  w_r, the round's start w_r being the common start: full weights from one start lean to the
  identity). Measured on the union of the round's held-out data (else the evaluation subset), the
  same set for every client. The reference is the aggregate, not one client: every client then
  gets a figure on the same footing (a reference client reads 0 against itself, and the figures
  would hang on which client came first), it is the model each client's update is averaged into,
  and the cost is one matching per client instead of one per pair. The aggregate holds a share of
  w_k itself, which pulls matching toward the identity, so P_k leans low, the more so with
  fewer clients a round. Cost: one evaluation per client, and one matching and POINTS
  evaluations per client and matcher; `align_client_seconds` records it for the round. Measured
  with one thread (5 clients, 5,450 held-out samples, both matchers): 2.8 CPU-seconds a round for
  the MLP; the paper's CNN took 74 with the full matcher alone (30 evaluations, BatchNorm
  statistics recomputed for each), so about 135 with both (55 evaluations): measure the CNN less
  often.

BatchNorm statistics of every measured model are recomputed on fixed training batches.
The figures join the round's row in metrics.jsonl as `align_*`.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from fedpfn.analysis.fusion import (
    EvalData,
    Probe,
    Scope,
    StateDict,
    analyse,
    average_states,
    has_batchnorm,
    matched_pair,
    parameter_distance,
)
from fedpfn.core.cache import client_data, dataset_on, initial_model
from fedpfn.core.config import RunConfig
from fedpfn.core.groups import Alignment
from fedpfn.core.seeding import Stream, torch_generator

POINTS = 5  # points on each line between two models: both ends, the midpoint and two more (cost: one
# evaluation each, with BatchNorm statistics recomputed, every measured round)
BN_BATCHES, BN_BATCH_SIZE = 4, 64  # training batches that BatchNorm statistics are recomputed on
PREFIX = "align_"
PAIR_FIGURES = ("loss_barrier", "loss_midpoint", "permutation_loss", "moved_fraction")
MATCHERS = ("full", "changes")  # fedpfn.analysis.matchers: full weights, and the changes from the round's start
CLIENT_FIGURES = ("permutation_loss", "matched_loss_barrier", "moved_fraction", "matched_distance", "converged")


def measured(cfg: RunConfig) -> bool:
    """Whether the run measures alignment at all (`--alignment-every K`, K > 0)."""
    return isinstance(cfg.alignment, Alignment)


def due(cfg: RunConfig, server_round: int) -> bool:
    return isinstance(every := cfg.alignment, Alignment) and server_round % every.alignment_every == 0


def retained_fraction(start: Sequence[float], fused: Sequence[float], own: Sequence[float],
                      examples: Sequence[int]) -> float | None:  # fmt: skip
    """R from each client's loss on its held-out data at the start, under the aggregate and of its own
    model; None when the clients gained nothing locally (the ratio is then undefined)."""
    gained = sum(n * (s - o) for n, s, o in zip(examples, start, own))
    if gained == 0:
        return None
    return sum(n * (s - f) for n, s, f in zip(examples, start, fused)) / gained


def to_state(arrays: dict[str, np.ndarray], device: torch.device) -> StateDict:
    return {name: torch.from_numpy(np.asarray(a)).to(device) for name, a in arrays.items()}


class AlignmentProbe:
    """The server's instrument: a model skeleton, fixed BN batches, and where each figure is measured."""

    def __init__(self, cfg: RunConfig, device: torch.device, eval_x: torch.Tensor, eval_y: torch.Tensor) -> None:
        self.cfg = cfg
        self.device = device
        order = torch.randperm(len(eval_y), generator=torch_generator(cfg.seed, Stream.ALIGNMENT, 0))
        chosen = order[: cfg.alignment.alignment_samples].to(eval_x.device)
        self.test = EvalData("evaluation subset", eval_x[chosen], eval_y[chosen])
        model = initial_model(cfg).to(device)
        self.train = dataset_on(cfg, device)
        bn_batches: tuple[torch.Tensor, ...] = ()
        if has_batchnorm(model):
            pool = torch.randperm(len(self.train.train_x), generator=torch_generator(cfg.seed, Stream.ALIGNMENT, 1))
            bn_batches = tuple(pool[: BN_BATCHES * BN_BATCH_SIZE].split(BN_BATCH_SIZE))
        self.probe = Probe(model, self.train.train_x if bn_batches else None, bn_batches)

    def held_out(self, partition: int) -> EvalData:
        """Client `partition`'s held-out local split (local_test_fraction of its partition)."""
        data = client_data(self.cfg, partition, self.device)
        rows = data.local_test.to(data.x.device)
        return EvalData(f"held-out of client {partition}", data.x[rows], data.y[rows])

    def measure(
        self, start: dict[str, np.ndarray], fused: dict[str, np.ndarray],
        models: list[dict[str, np.ndarray]], partitions: list[int], examples: list[int],
    ) -> dict[str, Any]:  # fmt: skip
        """The `align_*` figures of a round: R over its clients, pair figures over the first few. A round
        whose models are not finite (training diverged) is recorded as such, with no figure: matching
        and losses of NaN weights are not readings, and the run goes on to its end."""
        if not all(np.isfinite(w).all() for m in (start, fused, *models) for w in m.values()):
            return {PREFIX + "diverged": True}
        local = self.cfg.evaluation.local_test_fraction > 0
        held = tuple(self.held_out(p) for p in partitions) if local else ()
        states = [to_state(m, self.device) for m in models]
        figures: dict[str, Any] = {"measured_on": "union of held-out" if local else self.test.name}
        if local:
            figures["retained_fraction"] = self.retained(to_state(start, self.device), to_state(fused, self.device),
                                                         states, held, examples)  # fmt: skip
        few = self.cfg.alignment.alignment_clients
        scope = Scope("union", held_out=held[:few]) if local else Scope("test", test=self.test)
        result = analyse(self.probe, states[:few], scope, POINTS, match="midpoint")
        figures.update({key: result[key] for key in PAIR_FIGURES})
        figures.update(fusion_gap=result["fusion_gap"], fused_acc=result["fused_acc"],
                       mean_client_acc=result["mean_individual_acc"], clients=len(states[:few]))  # fmt: skip
        everyone = Scope("union", held_out=held).data_for(list(range(len(held)))) if local else [self.test]
        figures.update(self.against_aggregate(to_state(start, self.device), to_state(fused, self.device), states,
                                              partitions, everyone))  # fmt: skip
        return {PREFIX + key: value for key, value in figures.items()}

    def against_aggregate(self, start: StateDict, fused: StateDict, states: list[StateDict], partitions: list[int],
                          data: list[EvalData]) -> dict[str, Any]:  # fmt: skip
        """`client_*` figures: every client of the round against the aggregate, under each of MATCHERS
        (`changes`: the changes from `start`, the model the round's clients started from)."""
        began = time.perf_counter()
        model = self.probe.model
        figures: dict[str, Any] = {"client_reference": "aggregate", "client_partitions": list(partitions),
                                   "client_distance": [parameter_distance(model, state, fused) for state in states]}  # fmt: skip
        found = {f"client_{key}_{m}": [] for m in MATCHERS for key in CLIENT_FIGURES}  # not *_loss: rows check those
        for state in states:
            plain = self.probe.measure(average_states([fused, state]), data)[0]
            for matcher in MATCHERS:
                pair = matched_pair(self.probe, fused, state, data, POINTS, plain, matcher, w0=start)
                for key in CLIENT_FIGURES:
                    found[f"client_{key}_{matcher}"].append(pair[key])
        figures.update(found)
        figures["client_seconds"] = round(time.perf_counter() - began, 3)
        return figures

    def retained(self, start: StateDict, fused: StateDict, states: list[StateDict],
                 held: tuple[EvalData, ...], examples: list[int]) -> float | None:  # fmt: skip
        """R over every client of the round, each on its own held-out data."""
        losses = {
            what: [self.probe.measure(state, [data])[0] for state, data in zip(states_, held)]
            for what, states_ in (("start", [start] * len(held)), ("fused", [fused] * len(held)), ("own", states))
        }
        return retained_fraction(losses["start"], losses["fused"], losses["own"], examples)
