"""Simulated attacks: a seeded fraction of the clients is malicious and says so through the
same protocol as everyone else (issue 43's robust-aggregation study).

Which partitions are malicious is drawn once from the run seed alone (Stream.ATTACK), so
every engine, every process and a resume agree without being told. The attacks:

- model poisoning (`sign-flip`, `scaled`, `gaussian`): `AttackClient` composes after every
  other part of the client (its rule, its anchors), so its `uploaded` hook sees what the
  client would send and replaces it, for the malicious clients alone (`torch.where` on a
  per-client flag: the honest ones' replies are bit for bit what they would be):
  sign-flip sends g - S (w - g) (S = 1: the update reversed), scaled sends g + S (w - g),
  gaussian sends g + S N(0, 1) (noise seeded by round and partition), where g is the model
  received and w the one trained;
- data poisoning (`label-flip`): a malicious client trains on labels y -> C - 1 - y, mapped
  where a cohort loads its batches (fedpfn.runtime.engines.prepared), and replies honestly.

Buffers (BatchNorm statistics) and the records a rule adds (SCAFFOLD's Δc) are sent as trained.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from clients.base import ClientRound, ClientRule, Round
from fedpfn.core.seeding import Stream, numpy_rng, torch_generator
from fedpfn.core.settings import above, between, is_set, one_of, setting
from fedpfn.core.training import Tensors

if TYPE_CHECKING:
    from fedpfn.core.config import RunConfig

ATTACKS = ("none", "sign-flip", "scaled", "gaussian", "label-flip")
SCALES = {"sign-flip": 1.0, "scaled": 10.0, "gaussian": 1.0}  # the attacks S means something to, its defaults
MALICIOUS = "malicious"  # the per-client flag, and the field of each clients.jsonl row


@dataclass(frozen=True)
class AttackParams:
    """The attack a fraction of the clients makes (docs/guide/attacks.md)."""

    attack: str = setting(
        "none", "simulated attack by a seeded fraction of the clients, g the model received and w the one trained: "
        "sign-flip (sends g - S (w - g)), scaled (g + S (w - g)), gaussian (g + S N(0, 1)), label-flip (trains on "
        "labels y -> C-1-y); none: every client is honest",
        one_of(ATTACKS),
    )
    attack_fraction: float = setting(
        0.2, "fraction of the clients that is malicious (drawn from the run seed; clients.jsonl marks them)",
        between(0, 1, low_open=True),
    )
    attack_scale: float | None = setting(None, "S of --attack sign-flip, scaled (the update's factor) and gaussian (the "
                                         "noise's standard deviation); default: 1, 10 and 1", above(0))  # fmt: skip

    @property
    def scale(self) -> float:
        """S, its attack's default where none is given."""
        return self.attack_scale if self.attack_scale is not None else SCALES.get(self.attack, 0.0)


def attack_of(cfg: RunConfig) -> AttackParams:
    """The run's attack (none: every client honest)."""
    return cfg.hyper(AttackClient.namespace(), AttackParams)


def attack_values(params: AttackParams) -> dict[str, Any]:
    """The settings a run records: none without an attack, so such a run reads as before them."""
    if params.attack == "none":
        return {}
    scale = {"attack_scale": params.scale} if params.attack in SCALES else {}
    return {"attack": params.attack, "attack_fraction": params.attack_fraction, **scale}


def attack_problems(params: AttackParams, num_clients: int, given: Collection[str] | None) -> list[str]:
    """A setting the attack does not use, or a fraction that makes no client malicious, one line each."""
    defaults = AttackParams()
    unused = [("attack_fraction", "only --attack uses it", params.attack == "none"),
              ("attack_scale", "only --attack sign-flip, scaled or gaussian uses it", params.attack not in SCALES)]  # fmt: skip
    out = [
        f"{name}: {getattr(params, name)} is set, but {why}"
        for name, why, idle in unused
        if idle and is_set(name, getattr(params, name), getattr(defaults, name), given)
    ]
    if not out and params.attack != "none" and malicious_count(params, num_clients) == 0:
        out.append(f"attack_fraction: {params.attack_fraction} of {num_clients} clients is no client; "
                   f"give at least {1 / num_clients:.3g}")  # fmt: skip
    return out


def attack_line(params: AttackParams, num_clients: int) -> list[str]:
    """The run header's line on the attack (none without one), as it shows a DP wrapper."""
    if params.attack == "none":
        return []
    scale = f", S {params.scale:g}" if params.attack in SCALES else ""
    return [f"  attack     {params.attack}{scale} by {malicious_count(params, num_clients)} of {num_clients} clients "
            "(drawn from the seed; clients.jsonl marks them)"]  # fmt: skip


def malicious_count(params: AttackParams, num_clients: int) -> int:
    return int(round(params.attack_fraction * num_clients)) if params.attack != "none" else 0


def malicious_partitions(params: AttackParams, run_seed: int, num_clients: int) -> frozenset[int]:
    """The malicious partition ids: drawn from the run seed alone, the same in every process."""
    count = malicious_count(params, num_clients)
    if count == 0:
        return frozenset()
    chosen = numpy_rng(run_seed, Stream.ATTACK).choice(num_clients, size=count, replace=False)
    return frozenset(int(p) for p in chosen)


def flip_labels(targets: torch.Tensor, flipped: list[bool], num_classes: int) -> torch.Tensor:
    """`targets` (one client's batch, or a stack of one batch per client) with the flipped
    clients' labels mapped y -> C - 1 - y."""
    if not any(flipped):
        return targets
    flags = torch.tensor(flipped, device=targets.device)
    flags = flags.view(-1, *[1] * (targets.dim() - 1)) if targets.dim() > 1 else flags[0]
    return torch.where(flags, num_classes - 1 - targets, targets)


class AttackClient(ClientRule):
    """Model poisoning, composed after every other part: a malicious client's reply replaced."""

    name = "attacks"  # its hyperparameters: attacks.attack, attacks.attack_fraction (fedpfn.core.hyper)
    Params = AttackParams
    personal_start = True  # it reads the model received only for the entries every client sends

    def __init__(self, this_round: Round) -> None:
        super().__init__(this_round)
        cfg = this_round.cfg
        self.malicious = malicious_partitions(self.hyper, cfg.seed, cfg.federation.num_clients)

    def inputs(self, client: ClientRound) -> Tensors:
        start = self.round.start
        like = next(iter(start.values()))
        flag = {MALICIOUS: torch.tensor(client.partition_id in self.malicious, device=like.device)}
        if self.hyper.attack != "gaussian":
            return flag
        generator = torch_generator(self.round.cfg.seed, Stream.ATTACK, self.round.server_round, client.partition_id)
        noise = {f"noise.{n}": torch.randn(v.shape, generator=generator, dtype=v.dtype).to(v.device) for n, v in start.items()}
        return {**flag, **noise}

    def uploaded(self, params: Tensors, per_client: Tensors) -> Tensors:
        start, scale, attack = self.round.start, self.hyper.scale, self.hyper.attack
        out = {}
        for name, trained in params.items():
            g = start[name]
            if attack == "sign-flip":
                sent = g - scale * (trained - g)
            elif attack == "scaled":
                sent = g + scale * (trained - g)
            else:
                sent = g + scale * per_client[f"noise.{name}"]
            out[name] = torch.where(per_client[MALICIOUS], sent, trained)
        return out


def mark_malicious(rows: list[dict[str, Any]], params: AttackParams, run_seed: int, num_clients: int) -> None:
    """Each clients.jsonl row gains `malicious` (true or false) in a run with an attack; the rows of a
    run without one stay as they were."""
    if params.attack == "none":
        return
    malicious = malicious_partitions(params, run_seed, num_clients)
    for row in rows:
        row[MALICIOUS] = int(row["partition_id"]) in malicious
