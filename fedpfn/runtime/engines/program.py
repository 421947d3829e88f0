"""One round of local training for a cohort of clients: the program every engine runs.

The same per-client functions (the rules composed: client_step.py) run three ways in one process,
each the mode's variant of the engine settings (fedpfn.core.groups):

- `Loop`: one client after another, each unvmapped (the ClientApp: a cohort of one);
- `Threads`: the same per-client program on several threads at once, one torch thread each;
- `Vmap`: all clients as one program over stacked tensors, in chunks (stacked.py).

The `Processes` mode deals a cohort to worker processes, each training its share as `Loop`
(processes.py). Loop, threads and processes give the same numbers bit for bit; vmap differs
only by the floating-point order of batched kernels.
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
from fedpfn.core.groups import Loop, Threads, Vmap
from fedpfn.runtime.engines.prepared import ClientJob, ClientTrained, PreparedCohort
from fedpfn.runtime.engines.result import CohortResult, cohort_result
from fedpfn.runtime.engines.sequential import train_loop, train_threads
from fedpfn.runtime.engines.stacked import train_chunks

if TYPE_CHECKING:
    from fedpfn.core.config import RunConfig

class CohortProgram(PreparedCohort):
    """The clients of one round that share `content`, and the program that trains them."""

    chunk: int | None = None  # the vmap chunk that fitted, once trained

    def train(self, mode: type[Vmap | Threads | Loop] = Loop, threads: int = 1, chunk: int | None = None) -> CohortResult:
        """Train every client and keep their state for their next round, as `mode` (its variant) runs
        them in this process.

        `threads`: torch threads per client in `Loop` (the ClientApp's `client_cpus`), or
        clients side by side in `Threads` (one torch thread each); `chunk`: clients per
        vmapped program (None: all).
        """
        ways = {
            Vmap: lambda: self._vmapped(chunk),
            Threads: lambda: train_threads(self, threads) if threads > 1 and len(self.clients) > 1 else train_loop(self, 1),
            Loop: lambda: train_loop(self, threads),
        }
        if mode not in ways:
            raise ValueError(f"{mode.__name__} is not a mode a cohort trains in within one process")
        return cohort_result(self, ways[mode]())

    def _vmapped(self, chunk: int | None) -> ClientTrained:
        trained, self.chunk = train_chunks(self, chunk or len(self.clients))
        return trained


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
    config = content[protocol.CONFIG]
    named = config.get(protocol.ACCEPTED_ROUND)  # None in a hand-made message: stateful rules refuse it
    job = ClientJob(partition_id, context_state, None if named is None else int(named), data, state_root)
    return CohortProgram(rule_classes, cfg, content, device, [job]).train(Loop).reply_content(0)
