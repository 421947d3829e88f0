"""One round of local training for a cohort of clients: the program every engine runs.

The same per-client functions (the rules composed: client_step.py) run three ways:

- `loop`: one client after another, each unvmapped (the ClientApp: a cohort of one);
- `threads`: the same per-client program on several threads at once, one torch thread each;
- `vmap`: all clients as one program over stacked tensors, in chunks (stacked.py).

`loop` and `threads` give the same numbers bit for bit; `vmap` differs only by the
floating-point order of batched kernels.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from flwr.app import RecordDict

from clients.base import ClientRule
from fedpfn.core import protocol
from fedpfn.core.cache import ClientData
from fedpfn.runtime.engines.prepared import ClientJob, PreparedCohort
from fedpfn.runtime.engines.result import CohortResult, cohort_result
from fedpfn.runtime.engines.sequential import train_loop, train_threads
from fedpfn.runtime.engines.stacked import train_chunks

if TYPE_CHECKING:
    from fedpfn.core.config import RunConfig

MODES = ("loop", "threads", "vmap")


class CohortProgram(PreparedCohort):
    """The clients of one round that share `content`, and the program that trains them."""

    chunk: int | None = None  # the vmap chunk that fitted, once trained

    def train(self, mode: str = "loop", threads: int = 1, chunk: int | None = None) -> CohortResult:
        """Train every client and keep their state for their next round.

        `threads`: torch threads per client in `loop` (the ClientApp's `client_cpus`), or
        clients side by side in `threads` (one torch thread each); `chunk`: clients per
        vmapped program (None: all).
        """
        if mode not in MODES:
            raise ValueError(f"mode '{mode}' is not one of {', '.join(MODES)}")
        if mode == "vmap":
            trained, self.chunk = train_chunks(self, chunk or len(self.clients))
        elif mode == "threads" and threads > 1 and len(self.clients) > 1:
            trained = train_threads(self, threads)
        else:
            trained = train_loop(self, threads)
        return cohort_result(self, trained)


def local_round(
    rule_classes: Sequence[type[ClientRule]],
    cfg: RunConfig,
    partition_id: int,
    context_state: RecordDict,
    device: torch.device,
    content: RecordDict,
    *,
    data: ClientData | None = None,
    state_root: Path | None = None,
) -> RecordDict:
    """One client's round from its train message (the ClientApp): its reply's content."""
    config = content.config_records[protocol.CONFIG]
    named = config.get(protocol.ACCEPTED_ROUND)  # None in a hand-made message: stateful rules refuse it
    job = ClientJob(partition_id, context_state, None if named is None else int(named), data, state_root)
    return CohortProgram(rule_classes, cfg, content, device, [job]).train("loop").reply_content(0)
