"""FedPFN's local training against FedAvg's on the same client, batches and start model.

    .venv/bin/python benchmarks/bench_anchors.py                  # CNN, 300 steps, 5 repeats, 1 and default threads, current and bits
    .venv/bin/python benchmarks/bench_anchors.py --steps 100 --repeats 3 --threads 1   # quick
    .venv/bin/python benchmarks/bench_anchors.py --variants current,naive,index,foreach,flat

FedAvg is `fedpfn.training.train_local` with no hooks. FedPFN is the same call with an
`after_step` hook that calls `AnchorFreeze.restore()` for a weight-level mask with rho 0.4
drawn by `fedpfn.anchors.draw_mask` (the client's `begin_round` does the same). Both use
SGD with momentum 0.9 and weight decay 5e-4 (the run defaults), batch 64, the same index
batches and the same initial weights.

Pairing against noise: the two variants train side by side in chunks of `--chunk` steps,
alternating which goes first, so both see the same load at almost the same moment. The
ratio is given two ways: total FedPFN time over total FedAvg time per repeat (median
over repeats), and the median over all chunks of the paired chunk ratio.

`--variants` adds experimental restores (copies of the freeze, defined in this file, the
core is not changed); each is checked to leave the anchors bit for bit at their values:
  current  fedpfn.anchors.AnchorFreeze: now the bitwise restore (`bits`)
  where    the earlier core restore: one torch.where(mask, anchor, p, out=p) per parameter
  naive    p[mask] = anchor[mask] per parameter (boolean indexing, the "naive" restore)
  index    anchor positions precomputed as flat indices: p.view(-1).index_put_ per parameter
  foreach  p = p * keep + anchor * mask with two torch._foreach_ calls for all parameters
           (NOT exact for NaN/inf parameters and turns -0.0 into +0.0; shown for its cost)
  flat     all parameters made views of one flat buffer, so one torch.where restores all
  noop     the hook is called but restores nothing: measures the hook and the pairing's bias
  bits     (p & keep) | anchor_bits on the parameters' integer views: exact for every value
           (no arithmetic), vectorised; the proposed replacement for AnchorFreeze.restore
"""

from __future__ import annotations

import argparse
import itertools
import sys
import time

import common
import torch
from common import median, table
from torch import nn

# --- experimental restores ---------------------------------------------------------------


class NaiveFreeze:
    def __init__(self, model: nn.Module, mask) -> None:
        params = dict(model.named_parameters())
        self._slots = [(params[n], m, params[n].detach().clone()) for n, m in mask.items() if bool(m.any())]

    @torch.no_grad()
    def restore(self) -> None:
        for p, m, a in self._slots:
            p[m] = a[m]


class IndexFreeze:
    """Anchors as (flat positions, values): the restore touches only the anchored 40 %."""

    def __init__(self, model: nn.Module, mask) -> None:
        params = dict(model.named_parameters())
        self._slots = []
        for n, m in mask.items():
            if not bool(m.any()):
                continue
            p = params[n]
            idx = m.reshape(-1).nonzero().squeeze(1)
            self._slots.append((p, (idx,), p.detach().reshape(-1)[idx].clone()))

    @torch.no_grad()
    def restore(self) -> None:
        for p, idx, values in self._slots:
            p.view(-1).index_put_(idx, values)


class ForeachFreeze:
    """p * (1 - mask) + anchor * mask for all parameters in two fused multi-tensor calls."""

    def __init__(self, model: nn.Module, mask) -> None:
        params = dict(model.named_parameters())
        names = [n for n, m in mask.items() if bool(m.any())]
        self._params = [params[n] for n in names]
        self._keep = [(~mask[n]).to(params[n].dtype) for n in names]
        self._fixed = [params[n].detach() * mask[n].to(params[n].dtype) for n in names]

    @torch.no_grad()
    def restore(self) -> None:
        torch._foreach_mul_(self._params, self._keep)
        torch._foreach_add_(self._params, self._fixed)


class NoopFreeze:
    """Calls nothing: the hook's own cost and any bias of the pairing (not a freeze)."""

    def __init__(self, model: nn.Module, mask) -> None:
        pass

    def restore(self) -> None:
        pass


_INT_OF = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


class WhereFreeze(NaiveFreeze):
    """The earlier core restore: one torch.where(mask, anchor, p, out=p) per parameter."""

    @torch.no_grad()
    def restore(self) -> None:
        for p, m, a in self._slots:
            torch.where(m, a, p, out=p)


class FlatFreeze:
    """Make every parameter a view of one flat buffer; one torch.where restores them all.

    Must be built before the optimizer (the optimizer keeps references to the
    parameters, which stay the same objects; only their storage moves).
    """

    def __init__(self, model: nn.Module, mask) -> None:
        params = [p for p in model.parameters() if p.requires_grad]
        names = {id(p): n for n, p in model.named_parameters()}
        flat = torch.cat([p.detach().reshape(-1) for p in params])
        flat_mask = torch.cat(
            [
                mask[names[id(p)]].reshape(-1)
                if names[id(p)] in mask
                else torch.zeros(p.numel(), dtype=torch.bool)
                for p in params
            ]
        )
        offset = 0
        for p in params:
            n = p.numel()
            p.data = flat[offset : offset + n].view_as(p)
            offset += n
        self._flat, self._mask, self._anchor = flat, flat_mask, flat.clone()

    @torch.no_grad()
    def restore(self) -> None:
        torch.where(self._mask, self._anchor, self._flat, out=self._flat)


def freeze_class(name: str):
    from fedpfn.anchors import AnchorFreeze

    return {
        "current": AnchorFreeze,  # the bitwise restore since it moved into the core
        "where": WhereFreeze,
        "naive": NaiveFreeze,
        "index": IndexFreeze,
        "foreach": ForeachFreeze,
        "flat": FlatFreeze,
        "bits": AnchorFreeze,
        "noop": NoopFreeze,
    }[name]


class RestoreHooks:
    """The client's after_step, as clients/anchored.py does it: restore after every step."""

    def __init__(self, freeze) -> None:
        self.freeze = freeze

    def loss_term(self, model):
        return None

    def after_backward(self, model):
        pass

    def after_step(self, model):
        self.freeze.restore()


# --- measurement -------------------------------------------------------------------------


class Variant:
    def __init__(self, name: str, cfg, init_state, mask_seed: int) -> None:
        from fedpfn.anchors import draw_mask
        from fedpfn.training import NoHooks, make_optimizer
        from fedpfn.workspace import initial_model

        self.name = name
        self.model = initial_model(cfg)
        self.model.load_state_dict(init_state)
        t0 = time.perf_counter()
        if name == "fedavg":
            self.hooks = NoHooks()
            self.freeze = None
        else:
            self.mask = draw_mask(self.model, cfg.anchor_ratio, mask_seed, "weight")
            self.freeze = freeze_class(name)(self.model, self.mask)
            self.hooks = RestoreHooks(self.freeze)
        self.setup = time.perf_counter() - t0
        self.optimizer = make_optimizer(self.model, cfg.optimizer, cfg.lr, cfg.momentum, cfg.weight_decay)
        self.anchor_values = {n: p.detach().clone() for n, p in self.model.named_parameters()}
        self.seconds = 0.0
        self.chunks: list[float] = []

    def train(self, data, batches) -> None:
        from fedpfn.training import train_local

        t0 = time.perf_counter()
        train_local(self.model, data.train_x, data.train_y, iter(batches), self.optimizer, hooks=self.hooks)
        dt = time.perf_counter() - t0
        self.seconds += dt
        self.chunks.append(dt)

    def exact(self) -> bool:
        if self.freeze is None or isinstance(self.freeze, NoopFreeze):
            return True
        params = dict(self.model.named_parameters())
        return all(torch.equal(params[n].detach()[m], self.anchor_values[n][m]) for n, m in self.mask.items())


def exact_on_special_values(name: str) -> bool:
    """After the weights turn NaN, inf and -0.0, are anchors restored (and the rest kept) bit for bit?"""
    from fedpfn.anchors import draw_mask

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 8), nn.Linear(8, 3))
    mask = draw_mask(model, 0.4, 3, "weight")
    anchors = {n: p.detach().clone() for n, p in model.named_parameters()}
    freeze = freeze_class(name)(model, mask)
    special = torch.tensor([float("nan"), float("inf"), float("-inf"), -0.0, 1.5])
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(special[torch.arange(p.numel()) % len(special)].view_as(p))
    wanted = {n: p.detach().clone() for n, p in model.named_parameters()}
    freeze.restore()
    ok = True
    for n, p in model.named_parameters():
        bits, want, anc = (
            p.detach().view(torch.int32),
            wanted[n].view(torch.int32),
            anchors[n].view(torch.int32),
        )
        m = mask[n]
        ok &= torch.equal(bits[m], anc[m]) and torch.equal(bits[~m], want[~m])
    return bool(ok)


def restore_alone(cfg, init_state, name: str, calls: int) -> float:
    """Microseconds per restore() call, outside training (after one training-like perturbation)."""
    v = Variant(name, cfg, init_state, mask_seed=1)
    with torch.no_grad():
        for p in v.model.parameters():
            p.add_(0.01)
    v.freeze.restore()
    t0 = time.perf_counter()
    for _ in range(calls):
        v.freeze.restore()
    return (time.perf_counter() - t0) / calls * 1e6


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="cnn")
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--chunk", type=int, default=10, help="steps per paired chunk")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--threads", default="1,default", help="comma list of thread counts; 'default' = torch's")
    ap.add_argument("--variants", default="current,bits", help="restores to compare with fedavg (see above)")
    ap.add_argument("--restore-calls", type=int, default=2000)
    ap.add_argument("--quiet-load", type=float, default=0.0, help="wait for 1-min load below this first")
    ap.add_argument("--flush-denormal", action="store_true", help="torch.set_flush_denormal(True) first")
    args = ap.parse_args(argv)
    if args.flush_denormal:
        torch.set_flush_denormal(True)

    from fedpfn.anchors import anchored_fraction
    from fedpfn.training import minibatches
    from fedpfn.workspace import dataset_on, initial_model

    cfg = common.bench_config(algorithm="fedpfn", model=args.model, batch_size=args.batch)
    default_threads = torch.get_num_threads()
    thread_list = [default_threads if t == "default" else int(t) for t in args.threads.split(",")]
    variants = args.variants.split(",")
    common.print_header(
        "bench_anchors: FedPFN local training (restore after every step) vs FedAvg",
        {
            "model": args.model,
            "rho": cfg.anchor_ratio,
            "granularity": "weight",
            "steps": args.steps,
            "chunk": args.chunk,
            "repeats": args.repeats,
            "batch": args.batch,
            "threads": thread_list,
            "variants": variants,
        },
    )
    data = dataset_on(cfg, torch.device("cpu"))
    init_state = {k: v.clone() for k, v in initial_model(cfg).state_dict().items()}
    n_params = sum(v.numel() for v in init_state.values())
    gen = torch.Generator().manual_seed(0)
    indices = torch.arange(len(data.train_y))
    batches = list(itertools.islice(minibatches(indices, args.batch, 1_000, gen), args.steps))
    chunks = [batches[i : i + args.chunk] for i in range(0, len(batches), args.chunk)]
    from fedpfn.anchors import draw_mask

    frac = anchored_fraction(draw_mask(initial_model(cfg), cfg.anchor_ratio, 1, "weight"))
    print(f"   model parameters: {n_params:,}; anchored fraction {frac:.3f}", flush=True)

    common.wait_for_quiet(args.quiet_load, 600)
    for threads in thread_list:
        torch.set_num_threads(threads)
        # warm-up: allocator, kernels
        warm = Variant("fedavg", cfg, init_state, 0)
        warm.train(data, batches[: min(20, len(batches))])
        per_rep: dict[str, list[float]] = {v: [] for v in ["fedavg", *variants]}
        paired: dict[str, list[float]] = {v: [] for v in variants}
        setups: dict[str, list[float]] = {v: [] for v in variants}
        exact: dict[str, bool] = {v: True for v in variants}
        for rep in range(args.repeats):
            seed = 1000 + rep
            runs = {"fedavg": Variant("fedavg", cfg, init_state, seed)}
            for v in variants:
                runs[v] = Variant(v, cfg, init_state, seed)
                setups[v].append(runs[v].setup)
            names = list(runs)
            for i, chunk in enumerate(chunks):
                order = names[(i + rep) % len(names) :] + names[: (i + rep) % len(names)]
                for name in order:
                    runs[name].train(data, chunk)
            for name, run in runs.items():
                per_rep[name].append(run.seconds)
            for v in variants:
                paired[v] += [b / a for a, b in zip(runs["fedavg"].chunks, runs[v].chunks)]
                exact[v] &= runs[v].exact()
        base = median(per_rep["fedavg"])
        step_ms = base / len(batches) * 1e3
        print()
        print(
            f"torch threads {threads}: FedAvg {median(per_rep['fedavg']):.3f} s for {len(batches)} steps "
            f"({step_ms:.2f} ms/step, {len(batches) * args.batch / base:.0f} samples/s); load {common.load_average()}"
        )
        rows = []
        for v in variants:
            ratios = [b / a for a, b in zip(per_rep["fedavg"], per_rep[v])]
            alone = restore_alone(cfg, init_state, v, args.restore_calls)
            rows.append(
                [
                    v,
                    median(per_rep[v]),
                    f"{median(ratios):.4f}",
                    f"{median(paired[v]):.4f}",
                    f"{alone:.1f}",
                    f"{alone / 1e3 / step_ms * 100:.2f} %",
                    f"{median(setups[v]) * 1e3:.2f}",
                    "n/a" if v == "noop" else "yes" if exact[v] else "NO",
                    "n/a" if v == "noop" else "yes" if exact_on_special_values(v) else "NO",
                ]
            )
        print(
            table(
                [
                    "restore",
                    "median s",
                    "ratio/fedavg (repeats)",
                    "ratio (paired chunks)",
                    "restore alone us",
                    "restore/step",
                    "mask+freeze setup ms",
                    "exact",
                    "exact on NaN/inf/-0",
                ],
                rows,
            )
        )
        print("target ratio <= 1.03")
    print()
    print(f"load average at end: {common.load_average()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
