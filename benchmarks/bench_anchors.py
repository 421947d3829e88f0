"""FedPFN's local training against FedAvg's on the same client, batches and start model.

    .venv/bin/python benchmarks/bench_anchors.py     # CNN, 300 steps, 5 repeats, 1 and default threads
    .venv/bin/python benchmarks/bench_anchors.py --steps 100 --repeats 3 --threads 1   # quick

FedAvg is `fedpfn.core.training.train_local` without anchors. FedPFN is the same call with a
weight-level mask of rho 0.4 drawn by `fedpfn.core.anchors.draw_mask`: the anchor freeze
(`training.freeze`, one `torch.where` per parameter after every optimizer step) is the one
the clients of every engine use. Both use SGD with momentum 0.9 and weight decay 5e-4 (the
run defaults), batch 64, the same index batches and the same initial weights.

Pairing against noise: the two train side by side in chunks of `--chunk` steps, rotating
which goes first, so both see the same load at almost the same moment. The ratio is given
two ways: total time over FedAvg's per repeat (median over repeats), and the median over
all chunks of the paired chunk ratio. The freeze alone is timed outside training too, and
checked to leave the anchors bit for bit at their values, also for NaN / inf / -0.0 weights.
"""

from __future__ import annotations

import argparse
import itertools
import sys
import time
from dataclasses import dataclass

import torch
from report import load_average, median, print_header, table, wait_for_quiet

from clients.anchored import AnchorParams
from fedpfn.core.anchors import anchored_fraction, draw_mask
from fedpfn.core.config import RunConfig
from fedpfn.core.data import DatasetSplits
from fedpfn.core.training import OptimizerSpec, freeze, minibatches, train_local
from fedpfn.runtime.algorithms import load_config

TARGET = 1.03  # FedPFN / FedAvg, local training time
State = dict[str, torch.Tensor]
Chunks = list[list[torch.Tensor]]  # index batches, a few steps each
VARIANTS = ("fedavg", "fedpfn")


class Variant:
    """One model training chunk after chunk, with anchors (fedpfn) or without (fedavg)."""

    def __init__(self, name: str, cfg: RunConfig, init_state: State, mask_seed: int) -> None:
        from fedpfn.core.cache import initial_model

        self.model = initial_model(cfg)
        self.model.load_state_dict(init_state)
        ratio = cfg.hyper("fedpfn", AnchorParams).anchor_ratio
        self.mask = draw_mask(self.model, ratio, mask_seed, "weight") if name == "fedpfn" else None
        self.spec = OptimizerSpec(cfg.local.optimizer, cfg.local.lr, momentum=cfg.local.momentum, weight_decay=cfg.local.weight_decay)
        self.anchors = {n: p.detach().clone() for n, p in self.model.named_parameters()}
        self.chunks: list[float] = []

    def train(self, data: DatasetSplits, batches: list[torch.Tensor]) -> None:
        start = time.perf_counter()
        train_local(self.model, data.train_x, data.train_y, iter(batches), self.spec, self.mask)
        self.chunks.append(time.perf_counter() - start)

    def exact(self) -> bool:
        """Anchored entries equal their anchor values (trivially so without anchors)."""
        params = dict(self.model.named_parameters())
        return all(torch.equal(params[n].detach()[m], self.anchors[n][m]) for n, m in (self.mask or {}).items())


def exact_on_special_values() -> bool:
    """With weights NaN, inf and -0.0, are anchors selected back (and the rest kept) bit for bit?"""
    special = torch.tensor([float("nan"), float("inf"), float("-inf"), -0.0, 1.5])
    weights = {"w": special[torch.arange(64) % len(special)].view(8, 8)}
    anchors = {"w": torch.randn(8, 8, generator=torch.Generator().manual_seed(0))}
    mask = {"w": torch.rand(8, 8, generator=torch.Generator().manual_seed(1)) < 0.4}
    out = freeze(weights, anchors, mask)
    bits = lambda t: t.view(torch.int32)  # noqa: E731  (NaN != NaN, bits are equal)
    m = mask["w"]
    return bool(torch.equal(bits(out["w"])[m], bits(anchors["w"])[m]) and torch.equal(bits(out["w"])[~m], bits(weights["w"])[~m]))


def freeze_alone(variant: Variant, calls: int) -> float:
    """Microseconds per freeze of the model's parameters, outside training."""
    assert variant.mask is not None
    params = {n: p.detach() + 0.01 for n, p in variant.model.named_parameters()}
    start = time.perf_counter()
    for _ in range(calls):
        freeze(params, variant.anchors, variant.mask)
    return (time.perf_counter() - start) / calls * 1e6


@dataclass
class Measured:
    """One thread count: seconds per repeat and paired chunk ratios of both variants."""

    threads: int
    steps: int
    per_repeat: dict[str, list[float]]
    paired: dict[str, list[float]]
    exact: bool


def measure(cfg: RunConfig, args: argparse.Namespace, data: DatasetSplits, init: State, chunks: Chunks) -> Measured:
    """Both variants side by side, chunk by chunk, rotating which goes first; `args.repeats` times."""
    Variant("fedavg", cfg, init, 0).train(data, chunks[0])  # warm-up: allocator, kernels
    m = Measured(torch.get_num_threads(), sum(map(len, chunks)), {n: [] for n in VARIANTS}, {n: [] for n in VARIANTS}, True)
    for rep in range(args.repeats):
        runs = {n: Variant(n, cfg, init, mask_seed=1000 + rep) for n in VARIANTS}
        for i, chunk in enumerate(chunks):
            order = VARIANTS if (i + rep) % 2 == 0 else VARIANTS[::-1]
            for name in order:
                runs[name].train(data, chunk)
        for name, run in runs.items():
            m.per_repeat[name].append(sum(run.chunks))
            m.paired[name] += [b / a for a, b in zip(runs["fedavg"].chunks, run.chunks)]
        m.exact &= runs["fedpfn"].exact()
    return m


def print_measured(m: Measured, cfg: RunConfig, init_state: State, args: argparse.Namespace) -> None:
    base = median(m.per_repeat["fedavg"])
    step_ms = base / m.steps * 1e3
    print(f"\ntorch threads {m.threads}: FedAvg {base:.3f} s for {m.steps} steps ({step_ms:.2f} ms/step, "
          f"{m.steps * args.batch / base:.0f} samples/s); load {load_average()}")  # fmt: skip
    alone = freeze_alone(Variant("fedpfn", cfg, init_state, 1), args.freeze_calls)
    ratios = [b / a for a, b in zip(m.per_repeat["fedavg"], m.per_repeat["fedpfn"])]
    rows = [
        ["fedavg (no anchors)", base, "1", "1", "", "", ""],
        ["fedpfn (freeze after every step)", median(m.per_repeat["fedpfn"]), f"{median(ratios):.4f}",
         f"{median(m.paired['fedpfn']):.4f}", f"{alone:.1f}", f"{alone / 1e3 / step_ms * 100:.2f} %",
         "yes" if m.exact and exact_on_special_values() else "NO"],
    ]  # fmt: skip
    headers = ["local training", "median s", "ratio/fedavg (repeats)", "ratio (paired chunks)", "freeze alone us",
               "freeze/step", "exact (also NaN/inf/-0)"]  # fmt: skip
    print(table(headers, rows))
    print(f"target ratio <= {TARGET}")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="cnn")
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--chunk", type=int, default=10, help="steps per paired chunk")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--threads", default="1,default", help="comma list of thread counts; 'default' = torch's")
    ap.add_argument("--freeze-calls", type=int, default=2000)
    ap.add_argument("--quiet-load", type=float, default=0.0, help="wait for 1-min load below this first")
    args = ap.parse_args(argv)
    default = torch.get_num_threads()
    args.threads = [default if t == "default" else int(t) for t in args.threads.split(",")]
    return args


def main(argv: list[str] | None = None) -> int:
    from fedpfn.core.cache import dataset_on, initial_model

    args = parse_args(argv)
    cfg = load_config({"algorithm": "fedpfn", "model": args.model, "batch_size": args.batch})
    ratio = cfg.hyper("fedpfn", AnchorParams).anchor_ratio
    print_header(
        "bench_anchors: FedPFN local training (the freeze after every step) vs FedAvg",
        {"model": args.model, "rho": ratio, "granularity": "weight", "steps": args.steps,
         "chunk": args.chunk, "repeats": args.repeats, "batch": args.batch, "threads": args.threads},
    )  # fmt: skip
    data = dataset_on(cfg, torch.device("cpu"))
    model = initial_model(cfg)
    init_state = {k: v.clone() for k, v in model.state_dict().items()}
    order = torch.Generator().manual_seed(0)
    every = minibatches(torch.arange(len(data.train_y)), args.batch, 1_000, order)
    batches = list(itertools.islice(every, args.steps))
    chunks = [batches[i : i + args.chunk] for i in range(0, len(batches), args.chunk)]
    fraction = anchored_fraction(draw_mask(model, ratio, 1, "weight"))
    print(f"   model parameters: {sum(v.numel() for v in init_state.values()):,}; anchored fraction {fraction:.3f}")
    wait_for_quiet(args.quiet_load)
    for threads in args.threads:
        torch.set_num_threads(threads)
        print_measured(measure(cfg, args, data, init_state, chunks), cfg, init_state, args)
    print(f"\nload average at end: {load_average()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
