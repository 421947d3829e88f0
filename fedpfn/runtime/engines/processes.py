"""The batched engine's `processes` mode: a round's clients trained by worker processes, each
on one torch thread.

Why: on the CPU a small client's step is mostly Python (the rules' hooks, torch's dispatch), and
the threads of one interpreter take turns at it; processes do not. Each client is the same
single-threaded computation as in `loop` and `threads` (`CohortProgram.train(Loop)`), and the
parts come back in client order, so a round's numbers are theirs bit for bit.

The workers are forked once per run from the driver, after it has loaded the dataset, so they
share its pages (copy-on-write) instead of loading their own. A round's clients are dealt to
them by size (the largest first, to the least loaded), each worker trains its share in client
order. The round's model reaches them in shared memory, written once by the driver; the rest of
the message goes through each worker's pipe. A worker writes its clients' saved state into the
run folder as the driver would (one machine), and sends back their `context.state`. The
clients' tensors are written into rows of shared memory that every process holds, each at its
place in the round (slots.py), so the driver reads the round where the workers wrote it; the
first round's, and any round the slots do not fit, come back through shared memory made for
them (torch.multiprocessing) and are put in the round's order by the driver.

Workers end with the run: closed by the driver; on EOF of their pipe; and, where the driver is
killed (kill -9 included), by the kernel's parent-death signal. They ignore SIGINT: Ctrl-C is
the driver's to handle, and the driver closes them.
"""

from __future__ import annotations

import ctypes
import gc
import multiprocessing
import os
import pickle
import signal
from collections.abc import Sequence
from multiprocessing.connection import Connection
from typing import Any, NamedTuple

import torch
import torch.multiprocessing  # noqa: F401  (tensors through shared memory, not copied into pickles)
from flwr.app import RecordDict

from fedpfn.core import protocol
from fedpfn.core.cache import client_indices, dataset_on
from fedpfn.core.config import RunConfig
from fedpfn.core.groups import Loop
from fedpfn.core.user_code import USER_FAULTS
from fedpfn.runtime.algorithms import client_rules
from fedpfn.runtime.engines.prepared import ClientJob
from fedpfn.runtime.engines.program import CohortProgram
from fedpfn.runtime.engines.result import CohortResult
from fedpfn.runtime.engines.slots import SharedModel, Slots, with_tensors
from fedpfn.runtime.resources import usable_cores

CLOSE_SECONDS = 5.0  # a worker not gone by then after being told to stop is killed
PR_SET_PDEATHSIG = 1  # prctl(2): the signal a process gets when its parent dies


class Share(NamedTuple):
    """A worker's part of a round, as the driver sends it."""

    content: RecordDict  # the round's message, less its model where `model_shared`
    jobs: list[ClientJob]
    positions: list[int]  # the jobs' places in the round
    slots: Slots | None  # slots to write into from now on (None: those held, if any)
    use_slots: bool
    model: SharedModel | None  # the shared model to read from now on (None: the one held)
    model_shared: bool


def worker_count(cfg: RunConfig) -> int:
    """One worker per core this process may use, no more than a round's clients."""
    return max(1, min(len(usable_cores()), cfg.federation.clients_per_round))


def deal(sizes: Sequence[int], workers: int) -> list[list[int]]:
    """Client positions dealt to `workers` by size: the largest first, each to the least loaded
    (ties to the lowest worker); each share in client order. A function of the sizes only."""
    shares: list[list[int]] = [[] for _ in range(workers)]
    load = [0] * workers
    for k in sorted(range(len(sizes)), key=lambda k: (-sizes[k], k)):
        w = min(range(workers), key=lambda w: (load[w], w))
        shares[w].append(k)
        load[w] += sizes[k]
    return [sorted(share) for share in shares if share]


class ProcessRunner:
    """A round's cohort trained by worker processes forked once per run."""

    def __init__(self, cfg: RunConfig, workers: int) -> None:
        self.cfg = cfg
        dataset_on(cfg, torch.device("cpu"))  # loaded (and the split made) before the fork: the workers share them
        client_indices(cfg)
        context = multiprocessing.get_context("fork")
        self.pipes: list[Connection] = []
        self.workers: list[Any] = []
        self.slots: Slots | None = None  # made after the first round, like its result
        self.held = [0] * workers  # the slots' generation each worker holds (0: none yet)
        self.model: SharedModel | None = None  # the round's model, made like the first round's
        self.models_made = 0  # each shared model's generation
        self.model_held = [0] * workers  # the shared model's generation each worker holds
        gc.freeze()  # the driver's objects out of the workers' collections: their pages stay shared
        try:
            for _ in range(workers):
                mine, theirs = context.Pipe()
                worker = context.Process(target=_serve, args=(cfg, theirs, os.getpid()), daemon=True)
                worker.start()
                theirs.close()
                self.pipes.append(mine)
                self.workers.append(worker)
        finally:
            gc.unfreeze()

    def __call__(self, content: RecordDict, jobs: list[ClientJob]) -> CohortResult:
        """The round's clients trained by the workers; the result's tensors are views of the
        slots where the workers could write them there (valid until the next call)."""
        indices = client_indices(self.cfg)
        sizes = [len(indices[job.partition_id]) for job in jobs]
        shares = deal(sizes, len(self.workers))
        slots = self.slots if self.slots is not None and self.slots.capacity >= len(jobs) else None
        content, model = self._shared_model(content)
        for w, (pipe, share) in enumerate(zip(self.pipes, shares)):
            offered, model_offered = _offer(slots, self.held, w), _offer(model, self.model_held, w)
            pipe.send(Share(content, [jobs[k] for k in share], share, offered, slots is not None, model_offered, model is not None))
        received = [self._receive(pipe, worker) for pipe, worker, _ in zip(self.pipes, self.workers, shares)]
        if failed := [value for outcome, value in received if outcome == "error"]:
            raise failed[0]  # every part read first, so no reply is left for the next round
        parts = [value for _, value in received]
        for share, (_, states, _) in zip(shares, parts):
            for k, state in zip(share, states):
                jobs[k].take_state(state)
        return self._joined([(part, written) for part, _, written in parts], shares, len(jobs))

    def _shared_model(self, content: RecordDict) -> tuple[RecordDict, SharedModel | None]:
        """`content` less its model, and the shared model holding it; or `content` as it is (and
        None) where its arrays have no torch dtype."""
        arrays = protocol.to_numpy(content[protocol.ARRAYS])
        if self.model is None or not self.model.fits(arrays):
            self.models_made += 1
            self.model = SharedModel.like(arrays, self.models_made)
        if self.model is None:
            return content, None
        self.model.write(arrays)
        return RecordDict({key: record for key, record in content.items() if key != protocol.ARRAYS}), self.model

    def _joined(self, parts: list[tuple[CohortResult, bool]], shares: list[list[int]], count: int) -> CohortResult:
        """The round in its order: views of the slots where every part was written there; else
        the parts joined, and slots made like the round for the next ones."""
        if self.slots is not None and all(written for _, written in parts):
            return with_tensors(CohortResult.merge([part for part, _ in parts], shares), self.slots.read(count))
        own = [with_tensors(part, self.slots.gather(share)) if written else part for (part, written), share in zip(parts, shares)]
        merged = CohortResult.merge(own, shares)
        generation = self.slots.generation + 1 if self.slots is not None else 1
        self.slots = Slots.like(merged, max(count, self.cfg.federation.clients_per_round), generation)
        return merged

    def _receive(self, pipe: Connection, worker: Any) -> tuple[str, Any]:
        """("done", (part, context states)) or ("error", the exception it raised); a worker that
        ended instead, said in one line."""
        try:
            return pipe.recv()
        except EOFError:
            worker.join(CLOSE_SECONDS)
            raise RuntimeError(
                f"a worker process of the batched engine (pid {worker.pid}) ended while training "
                f"(exit code {worker.exitcode})"
            ) from None

    def close(self) -> None:
        """Every worker told to stop, and killed if it has not within CLOSE_SECONDS."""
        for pipe in self.pipes:
            try:
                pipe.send(None)
            except OSError:  # already gone
                pass
            pipe.close()
        for worker in self.workers:
            worker.join(CLOSE_SECONDS)
            if worker.is_alive():
                worker.kill()
                worker.join()
        self.pipes, self.workers = [], []


def _offer(shared: Slots | SharedModel | None, held: list[int], w: int) -> Slots | SharedModel | None:
    """`shared` where worker `w` does not hold that generation yet (noted as held from now on);
    None where it does, or where there is nothing shared this round."""
    if shared is None or held[w] == shared.generation:
        return None
    held[w] = shared.generation
    return shared


def _serve(cfg: RunConfig, pipe: Connection, driver: int) -> None:
    """A worker: cohorts from the pipe, trained as `loop` on one torch thread, until told to stop."""
    _die_with_parent(driver)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    torch.set_num_threads(1)
    device = torch.device("cpu")
    rules = client_rules(cfg)
    slots: Slots | None = None
    model: SharedModel | None = None
    while True:
        try:
            asked = pipe.recv()
        except EOFError:
            return
        if asked is None:
            return
        slots, model = asked.slots or slots, asked.model or model
        jobs = asked.jobs
        try:
            received = model.read() if asked.model_shared and model is not None else None
            result = CohortProgram(rules, cfg, asked.content, device, jobs, received).train(Loop, threads=1)
            written = asked.use_slots and slots is not None and slots.fits(result, asked.positions)
            if written:
                slots.write(result, asked.positions)
                result = with_tensors(result, {"params": {}, "buffers": {}, "records": {}})
            pipe.send(("done", (result, [job.context_state for job in jobs], written)))
        except USER_FAULTS as err:  # a user's rule may raise anything, SystemExit too: the driver raises it, as if it had trained the clients
            pipe.send(("error", _sendable(err)))


def _sendable(err: BaseException) -> BaseException:
    """`err` if it survives pickling, else a RuntimeError that says what it was."""
    try:
        pickle.loads(pickle.dumps(err))
        return err
    except Exception:  # noqa: BLE001
        return RuntimeError(f"{type(err).__name__}: {err}")


def _die_with_parent(driver: int) -> None:
    """SIGTERM to this process when the driver dies (Linux's prctl; elsewhere the pipe's EOF)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):
        return
    if os.getppid() != driver:  # the driver died before the signal was armed
        os._exit(0)
