"""The batched engine spread over Ray actors: this machine's GPUs, or the nodes of a Ray cluster.

Each actor runs the batched program (fedpfn.runtime.engines.runner) on the place its slot
names (fedpfn.runtime.engines.placement): its node, its CPUs, its GPU. A round's clients go
to the actors in contiguous blocks, so the parts concatenate in order.

A client's state travels with its job, so no folder has to be shared by the nodes: the
driver sends each client's `context.state` and its saved versions (the run folder's
`client_state/<partition>/`, read here), the actor trains it in a scratch folder of its own
node, and sends both back; the driver writes the versions into the run folder (and removes
those the client dropped), exactly as a client training here would have left them.
"""

from __future__ import annotations

import logging
import tempfile
from pathlib import Path

import numpy as np
import torch
from flwr.app import RecordDict

from clients.state import ClientStateStore
from fedpfn.core.config import RunConfig
from fedpfn.core.files import atomic_write_bytes
from fedpfn.runtime.engines.runner import CohortRunner
from fedpfn.runtime.engines.placement import Slot, batched_slots
from fedpfn.runtime.engines.prepared import ClientJob
from fedpfn.runtime.engines.ray_start import enter_driver_folder, init_ray
from fedpfn.runtime.engines.result import CohortResult

log = logging.getLogger("fedpfn.engines")
PLACE_SECONDS = 120.0  # an actor not started by then is reported, not waited on
Files = dict[str, bytes]  # a client's saved state: path under its folder -> content


class CohortWorker:
    """A Ray actor holding a CohortRunner on the CPUs (and GPU) of its slot."""

    def __init__(self, cfg_json: str, cpus: int) -> None:
        from fedpfn.runtime.algorithms import config_from_json

        enter_driver_folder()
        self.runner = CohortRunner(config_from_json(cfg_json), threads=cpus)

    def node(self) -> str:
        """The Ray node this actor runs on."""
        import ray

        return ray.get_runtime_context().get_node_id()

    def train(
        self, content: RecordDict, jobs: list[ClientJob], saved: list[Files]
    ) -> tuple[CohortResult, list[RecordDict], list[Files], str]:
        """The cohort's result on the CPU, the clients' context states and saved versions as
        training left them, and the node that trained them."""
        with tempfile.TemporaryDirectory(prefix="fedpfn-state-") as scratch:
            for job, files in zip(jobs, saved):
                write_files(Path(scratch) / str(job.partition_id), files)
                job.state_root = Path(scratch)
            result = self.runner(content, jobs)
            after = [read_files(Path(scratch) / str(job.partition_id)) for job in jobs]
        return result.to(torch.device("cpu")), [job.context_state for job in jobs], after, self.node()


class RayRunner:
    """A round's cohort split over Ray actors, one per slot, each running the batched program."""

    def __init__(self, cfg: RunConfig, slots: list[Slot]) -> None:
        import ray

        self.cfg = cfg
        actor = ray.remote(CohortWorker)
        self.actors = [actor.options(**slot.options()).remote(cfg.to_json(), slot.cpus) for slot in slots]
        try:
            self.nodes = ray.get([a.node.remote() for a in self.actors], timeout=PLACE_SECONDS)
        except ray.exceptions.GetTimeoutError:
            self.close()
            raise RuntimeError(f"Ray did not start the batched engine's actors within {PLACE_SECONDS:g} s") from None
        log.debug("actors on nodes %s", self.nodes)

    def __call__(self, content: RecordDict, jobs: list[ClientJob]) -> CohortResult:
        import ray

        blocks = [list(block) for block in np.array_split(np.arange(len(jobs)), len(self.actors)) if len(block)]
        calls = []
        for actor, block in zip(self.actors, blocks):
            block_jobs = [jobs[i] for i in block]
            saved = [read_files(self.store(job)) for job in block_jobs]
            calls.append(actor.train.remote(content, block_jobs, saved))
        parts = ray.get(calls)
        for block, (_, states, saved, node) in zip(blocks, parts):
            pids = [jobs[i].partition_id for i in block]
            log.debug("clients %s trained on node %s", pids, node)
            for i, state, files in zip(block, states, saved):
                jobs[i].take_state(state)
                sync_files(self.store(jobs[i]), files)
        return CohortResult.merge([part[0] for part in parts])

    def store(self, job: ClientJob) -> Path:
        """The client's folder of saved state in the run folder, on this (the driver's) machine."""
        return ClientStateStore(self.cfg.run_dir, job.partition_id).root

    def close(self) -> None:
        """The actors ended and Ray left (as Flower's engine leaves it), so the next run in this
        process starts or joins afresh and finds their CPUs and GPUs free."""
        import ray

        for actor in self.actors:
            ray.kill(actor)
        ray.shutdown()


def read_files(root: Path) -> Files:
    """Every regular file under `root` (none if it does not exist), by its path under it."""
    if not root.is_dir():
        return {}
    found = (p for p in sorted(root.rglob("*")) if p.is_file() and not p.is_symlink())
    return {str(p.relative_to(root)): p.read_bytes() for p in found}


def write_files(root: Path, files: Files) -> None:
    """`files` written under `root` (a scratch folder of the actor's node)."""
    for name, data in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(data)


def sync_files(root: Path, files: Files) -> None:
    """`root` made to hold exactly `files`: new and changed ones written atomically, the rest removed."""
    before = read_files(root)
    for name, data in files.items():
        if before.get(name) != data:
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            atomic_write_bytes(root / name, data)
    for name in set(before) - set(files):
        (root / name).unlink()


def start_ray(cfg: RunConfig) -> list[Slot]:
    """Ray joined at `ray_address` or started on this machine; the actors' slots, checked."""
    from fedpfn.runtime.engines.ray import backend_config

    init_ray(**backend_config(cfg)["init_args"])
    return batched_slots(cfg)
