"""A round's cohort trained on one device: the batched engine's program where it runs (this
process, or each Ray actor of fedpfn.runtime.engines.actors), its device, mode and chunk size."""

from __future__ import annotations

import os

import torch
from flwr.app import RecordDict

from clients import ClientJob, Cohort, CohortResult
from fedpfn.core.config import RunConfig
from fedpfn.core.training import pick_device
from fedpfn.runtime.algorithms import client_rules

CONV_MODELS = ("cnn", "resnet20", "vgg11")  # models whose convolutions are slow under vmap on the CPU


def device_of(cfg: RunConfig) -> torch.device:
    """The GPU when one is visible and the clients may use it (`client_gpus` not 0), else the CPU."""
    return pick_device(want_gpu=cfg.client_gpus is None or cfg.client_gpus > 0)


def mode_of(cfg: RunConfig, device: torch.device) -> str:
    """`engine_mode`, with auto resolved: vmap on a GPU or for a model without convolutions."""
    if cfg.engine_mode != "auto":
        return cfg.engine_mode
    return "vmap" if device.type == "cuda" or cfg.model not in CONV_MODELS else "threads"


class CohortRunner:
    """Trains a round's cohort on this process's device, with the chunk size that fits it."""

    def __init__(self, cfg: RunConfig, threads: int | None = None) -> None:
        self.cfg = cfg
        self.device = device_of(cfg)
        self.mode = mode_of(cfg, self.device)
        cores = threads or os.cpu_count() or 1  # `threads`: clients side by side; `loop`: the ClientApp's
        self.threads = cores if self.mode == "threads" else max(1, int(cfg.client_cpus))
        self.chunk = cfg.engine_chunk or None  # None: measured on the first round (vmap on a GPU)

    def __call__(self, content: RecordDict, jobs: list[ClientJob]) -> CohortResult:
        cohort = Cohort(client_rules(self.cfg), self.cfg, content, self.device, jobs)
        if self.chunk is None and self.mode == "vmap" and self.device.type == "cuda":
            self.chunk = fitting_chunk(cohort, self.device)
        result = cohort.train(self.mode, threads=self.threads, chunk=self.chunk)
        self.chunk = cohort.chunk or self.chunk  # smaller after running out of memory
        return result

    def close(self) -> None:
        """Nothing to let go of in this process."""


STATE_COPIES = 6  # per parameter a client holds: its parameters, gradient, update, optimizer state, inputs, upload
MEMORY_MARGIN = 0.7  # of the free memory a chunk may plan to use


def fitting_chunk(cohort: Cohort, device: torch.device) -> int:
    """How many clients one vmapped program can hold in the device's free memory.

    One client's activations and gradients are measured on its first batch (the peak of
    one forward and backward); its tensors are counted as STATE_COPIES of its parameters.
    """
    info = cohort.info
    model, batch = info.model, cohort.clients[0].batches[0]
    data = cohort.clients[0].data
    inputs = data.x[batch.to(data.x.device)].to(device, cohort.dtype)
    torch.cuda.synchronize(device)
    before = torch.cuda.memory_allocated(device)
    torch.cuda.reset_peak_memory_stats(device)
    params = {n: p.detach().clone().requires_grad_(True) for n, p in info.start.items()}
    buffers = {n: b.clone() for n, b in info.start_buffers.items()}
    out = torch.func.functional_call(model, (params, buffers), (inputs,))
    out.float().sum().backward()
    peak = torch.cuda.max_memory_allocated(device) - before
    param_bytes = sum(p.numel() * p.element_size() for p in info.start.values())
    del params, buffers, out
    per_client = peak + STATE_COPIES * param_bytes
    free, _ = torch.cuda.mem_get_info(device)
    return max(1, int(MEMORY_MARGIN * free / per_client))

