"""FedPFN's local training against FedAvg's on the same client, batches and start model.

    .venv/bin/python benchmarks/bench_anchors.py     # CNN, 300 steps, 5 repeats, 1 and default threads
    .venv/bin/python benchmarks/bench_anchors.py --steps 100 --repeats 3 --threads 1   # quick
    .venv/bin/python benchmarks/bench_anchors.py --variants core,where,naive,index,foreach,noop

FedAvg is `fedpfn.core.training.train_local` with no hooks (no anchors). FedPFN is the same
call with an anchor restore after every optimizer step, for a weight-level mask with
rho 0.4 drawn by `fedpfn.core.anchors.draw_mask` (as the client's `begin_round` does). All use
SGD with momentum 0.9 and weight decay 5e-4 (the run defaults), batch 64, the same index
batches and the same initial weights.

Pairing against noise: the variants train side by side in chunks of `--chunk` steps,
rotating which goes first, so all see the same load at almost the same moment. The ratio
is given two ways: total time over FedAvg's per repeat (median over repeats), and the
median over all chunks of the paired chunk ratio.

Restores (`--variants`; the default times the first three, each a different implementation):
  core     fedpfn.core.anchors.AnchorFreeze, the one the clients use: (p & keep) | anchor_bits
           on the parameters' integer views (exact for every value, no arithmetic)
  where    torch.where(mask, anchor, p, out=p) per parameter (the core's restore until
           the bitwise one replaced it)
  naive    p[mask] = anchor[mask] per parameter (boolean indexing)
  index    anchor positions precomputed as flat indices: p.view(-1).index_put_ per parameter
  foreach  p = p * keep + anchor * mask with two torch._foreach_ calls for all parameters
           (NOT exact for NaN/inf parameters and turns -0.0 into +0.0; shown for its cost)
  noop     the hook is called but restores nothing: the hook's cost and the pairing's bias
Each is checked to leave the anchors bit for bit at their values, also after the weights
went NaN / inf / -0.0.
"""

from __future__ import annotations

import argparse
from abc import ABC, abstractmethod
import itertools
import sys
import time
from dataclasses import dataclass

import torch
from report import load_average, median, print_header, table, wait_for_quiet
from torch import nn

from fedpfn.core.anchors import AnchorFreeze, AnchorMask, AnchorParams, anchored_fraction, draw_mask
from fedpfn.core.config import RunConfig
from fedpfn.core.data import DatasetSplits
from fedpfn.core.training import NoHooks, make_optimizer, minibatches, train_local

TARGET = 1.03  # FedPFN / FedAvg, local training time
State = dict[str, torch.Tensor]

# --- the restores compared with the core's ------------------------------------------------


class Restore(NoHooks, ABC):
    """A restore after every optimizer step, as AnchorFreeze does it; subclasses say how."""

    def __init__(self, model: nn.Module, mask: AnchorMask) -> None:
        params = dict(model.named_parameters())
        self._slots = [(params[n], m, params[n].detach().clone()) for n, m in mask.items() if bool(m.any())]

    @abstractmethod
    def restore(self) -> None:
        """Put every anchored entry back (under torch.no_grad in the subclasses)."""

    def after_step(self, model: nn.Module) -> None:
        self.restore()


class WhereRestore(Restore):
    @torch.no_grad()
    def restore(self) -> None:
        for p, m, a in self._slots:
            torch.where(m, a, p, out=p)


class NaiveRestore(Restore):
    @torch.no_grad()
    def restore(self) -> None:
        for p, m, a in self._slots:
            p[m] = a[m]


class IndexRestore(Restore):
    """Anchors as (flat positions, values): the restore touches only the anchored 40 %."""

    def __init__(self, model: nn.Module, mask: AnchorMask) -> None:
        super().__init__(model, mask)
        self._flat = [(p, m.reshape(-1).nonzero().squeeze(1)) for p, m, _ in self._slots]
        self._values = [a.reshape(-1)[idx] for (_, _, a), (_, idx) in zip(self._slots, self._flat)]

    @torch.no_grad()
    def restore(self) -> None:
        for (p, idx), values in zip(self._flat, self._values):
            p.view(-1).index_put_((idx,), values)


class ForeachRestore(Restore):
    """p * (1 - mask) + anchor * mask for all parameters in two fused multi-tensor calls."""

    def __init__(self, model: nn.Module, mask: AnchorMask) -> None:
        super().__init__(model, mask)
        self._params = [p for p, _, _ in self._slots]
        self._keep = [(~m).to(p.dtype) for p, m, _ in self._slots]
        self._fixed = [a * m.to(p.dtype) for p, m, a in self._slots]

    @torch.no_grad()
    def restore(self) -> None:
        torch._foreach_mul_(self._params, self._keep)
        torch._foreach_add_(self._params, self._fixed)


class NoopRestore(Restore):
    @torch.no_grad()
    def restore(self) -> None:
        pass


RESTORES: dict[str, type] = {
    "core": AnchorFreeze,
    "where": WhereRestore,
    "naive": NaiveRestore,
    "index": IndexRestore,
    "foreach": ForeachRestore,
    "noop": NoopRestore,
}
DEFAULT_VARIANTS = "core,where,naive"

# --- measurement -------------------------------------------------------------------------


class Variant:
    """One model training chunk after chunk, with a restore (or none: FedAvg)."""

    def __init__(self, name: str, cfg: RunConfig, init_state: State, mask_seed: int) -> None:
        from fedpfn.core.cache import initial_model

        self.name = name
        self.model = initial_model(cfg)
        self.model.load_state_dict(init_state)
        start = time.perf_counter()
        self.mask = {} if name == "fedavg" else draw_mask(self.model, anchor_ratio(cfg), mask_seed, "weight")
        self.freeze: AnchorFreeze | Restore | None = None
        if name != "fedavg":
            self.freeze = RESTORES[name](self.model, self.mask)
        self.setup = time.perf_counter() - start
        self.optimizer = make_optimizer(self.model, cfg.optimizer, cfg.lr, cfg.momentum, cfg.weight_decay)
        self.anchors = {n: p.detach().clone() for n, p in self.model.named_parameters()}
        self.chunks: list[float] = []

    def train(self, data: DatasetSplits, batches: list[torch.Tensor]) -> None:
        start = time.perf_counter()
        hooks = NoHooks() if self.freeze is None else self.freeze
        train_local(self.model, data.train_x, data.train_y, iter(batches), self.optimizer, hooks)
        self.chunks.append(time.perf_counter() - start)

    def exact(self) -> bool:
        """Anchored entries equal their anchor values (trivially so without anchors)."""
        params = dict(self.model.named_parameters())
        return all(torch.equal(params[n].detach()[m], self.anchors[n][m]) for n, m in self.mask.items())


def anchor_ratio(cfg: RunConfig) -> float:
    return cfg.params(AnchorParams).anchor_ratio


def exact_on_special_values(name: str) -> bool:
    """After the weights turn NaN, inf and -0.0, are anchors restored (and the rest kept) bit for bit?"""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 8), nn.Linear(8, 3))
    mask = draw_mask(model, 0.4, 3, "weight")
    anchors = {n: p.detach().clone() for n, p in model.named_parameters()}
    freeze = RESTORES[name](model, mask)
    special = torch.tensor([float("nan"), float("inf"), float("-inf"), -0.0, 1.5])
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(special[torch.arange(p.numel()) % len(special)].view_as(p))
    wanted = {n: p.detach().clone() for n, p in model.named_parameters()}
    freeze.restore()
    ok = True
    for n, p in model.named_parameters():
        bits, want, anchor = (t.view(torch.int32) for t in (p.detach(), wanted[n], anchors[n]))
        ok &= torch.equal(bits[mask[n]], anchor[mask[n]]) and torch.equal(bits[~mask[n]], want[~mask[n]])
    return bool(ok)


def restore_alone(cfg: RunConfig, init_state: State, name: str, calls: int) -> float:
    """Microseconds per restore() call outside training (after one training-like change)."""
    variant = Variant(name, cfg, init_state, mask_seed=1)
    assert variant.freeze is not None
    with torch.no_grad():
        for p in variant.model.parameters():
            p.add_(0.01)
    variant.freeze.restore()
    start = time.perf_counter()
    for _ in range(calls):
        variant.freeze.restore()
    return (time.perf_counter() - start) / calls * 1e6


@dataclass
class Measured:
    """One thread count: seconds per repeat and paired chunk ratios of every variant."""

    threads: int
    steps: int
    per_repeat: dict[str, list[float]]
    paired: dict[str, list[float]]
    setup: dict[str, list[float]]
    exact: dict[str, bool]


Chunks = list[list[torch.Tensor]]  # index batches, a few steps each


def measure(
    cfg: RunConfig, args: argparse.Namespace, data: DatasetSplits, init: State, chunks: Chunks
) -> Measured:
    """All variants side by side, chunk by chunk, rotating which goes first; `args.repeats` times."""
    names = ["fedavg", *args.variants]
    Variant("fedavg", cfg, init, 0).train(data, chunks[0])  # warm-up: allocator, kernels
    empty = lambda: {n: [] for n in names}  # noqa: E731
    m = Measured(torch.get_num_threads(), sum(map(len, chunks)), empty(), empty(), empty(), {})
    for rep in range(args.repeats):
        runs = {n: Variant(n, cfg, init, mask_seed=1000 + rep) for n in names}
        for i, chunk in enumerate(chunks):
            turn = (i + rep) % len(names)
            for name in names[turn:] + names[:turn]:
                runs[name].train(data, chunk)
        for name, run in runs.items():
            m.per_repeat[name].append(sum(run.chunks))
            m.setup[name].append(run.setup)
            m.paired[name] += [b / a for a, b in zip(runs["fedavg"].chunks, run.chunks)]
            m.exact[name] = m.exact.get(name, True) and run.exact()
    return m


def print_measured(m: Measured, cfg: RunConfig, init_state: State, args: argparse.Namespace) -> None:
    """One table per thread count: every restore as a ratio to FedAvg, its cost alone, exactness."""
    base = median(m.per_repeat["fedavg"])
    step_ms = base / m.steps * 1e3
    print(f"\ntorch threads {m.threads}: FedAvg {base:.3f} s for {m.steps} steps ({step_ms:.2f} ms/step, "
          f"{m.steps * args.batch / base:.0f} samples/s); load {load_average()}")  # fmt: skip
    rows = [["fedavg (no anchors)", base, "1", "1", "", "", "", "", ""]]
    for v in args.variants:
        alone = restore_alone(cfg, init_state, v, args.restore_calls)
        ratios = [b / a for a, b in zip(m.per_repeat["fedavg"], m.per_repeat[v])]
        checked = v != "noop"
        rows.append([
            v, median(m.per_repeat[v]), f"{median(ratios):.4f}", f"{median(m.paired[v]):.4f}", f"{alone:.1f}",
            f"{alone / 1e3 / step_ms * 100:.2f} %", f"{median(m.setup[v]) * 1e3:.2f}",
            ("yes" if m.exact[v] else "NO") if checked else "n/a",
            ("yes" if exact_on_special_values(v) else "NO") if checked else "n/a",
        ])  # fmt: skip
    headers = ["restore", "median s", "ratio/fedavg (repeats)", "ratio (paired chunks)", "restore alone us",
               "restore/step", "mask+freeze setup ms", "exact", "exact on NaN/inf/-0"]  # fmt: skip
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
    ap.add_argument("--variants", default=DEFAULT_VARIANTS, help=f"restores to time: {', '.join(RESTORES)}")
    ap.add_argument("--restore-calls", type=int, default=2000)
    ap.add_argument("--quiet-load", type=float, default=0.0, help="wait for 1-min load below this first")
    args = ap.parse_args(argv)
    args.variants = args.variants.split(",")
    if unknown := [v for v in args.variants if v not in RESTORES]:
        ap.error(f"unknown variant(s) {', '.join(unknown)}; use {', '.join(RESTORES)}")
    default = torch.get_num_threads()
    args.threads = [default if t == "default" else int(t) for t in args.threads.split(",")]
    return args


def main(argv: list[str] | None = None) -> int:
    from fedpfn.core.cache import dataset_on, initial_model

    args = parse_args(argv)
    cfg = RunConfig(algorithm="fedpfn", model=args.model, batch_size=args.batch).validated()
    print_header(
        "bench_anchors: FedPFN local training (restore after every step) vs FedAvg",
        {"model": args.model, "rho": anchor_ratio(cfg), "granularity": "weight", "steps": args.steps,
         "chunk": args.chunk, "repeats": args.repeats, "batch": args.batch, "threads": args.threads,
         "variants": args.variants},
    )  # fmt: skip
    data = dataset_on(cfg, torch.device("cpu"))
    model = initial_model(cfg)
    init_state = {k: v.clone() for k, v in model.state_dict().items()}
    order = torch.Generator().manual_seed(0)
    every = minibatches(torch.arange(len(data.train_y)), args.batch, 1_000, order)
    batches = list(itertools.islice(every, args.steps))
    chunks = [batches[i : i + args.chunk] for i in range(0, len(batches), args.chunk)]
    fraction = anchored_fraction(draw_mask(model, anchor_ratio(cfg), 1, "weight"))
    size = sum(v.numel() for v in init_state.values())
    print(f"   model parameters: {size:,}; anchored fraction {fraction:.3f}")
    wait_for_quiet(args.quiet_load)
    for threads in args.threads:
        torch.set_num_threads(threads)
        print_measured(measure(cfg, args, data, init_state, chunks), cfg, init_state, args)
    print(f"\nload average at end: {load_average()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
