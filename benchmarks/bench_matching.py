"""Time weight matching (`fedpfn.analysis.matching.weight_matching`) for one pair of each model, on CPU.

Two pairs per model, 1 x 28 x 28 inputs (Fashion-MNIST's shape), 10 classes, one thread:
two different random initialisations (torch seeds 0 and 1), and a model with a randomly
shuffled copy of itself (matching must undo the shuffle exactly; checked). Wall and CPU
seconds, median over the repeats; quick setting: --repeats 1.

    .venv/bin/python benchmarks/bench_matching.py
"""

from __future__ import annotations

import argparse
import time

import report
import torch

from fedpfn.analysis.matching import (
    apply_permutation,
    moved_fraction,
    permutation_spec,
    random_permutation,
    weight_matching,
)
from fedpfn.core.models import build_model

MODELS = ("mlp", "cnn", "vgg11", "resnet20")


def _timed(spec, state_a, state_b, repeats: int) -> tuple[list[float], list[float], dict[str, torch.Tensor]]:
    walls, cpus = [], []
    for _ in range(repeats):
        wall, cpu = time.perf_counter(), time.process_time()
        perms = weight_matching(spec, state_a, state_b)
        walls.append(time.perf_counter() - wall)
        cpus.append(time.process_time() - cpu)
    return walls, cpus, perms


def _rows(name: str, repeats: int) -> list[list[object]]:
    models = []
    for seed in (0, 1):
        torch.manual_seed(seed)
        models.append(build_model(name, (1, 28, 28), 10))
    spec = permutation_spec(models[0])
    state_a, state_b = (m.state_dict() for m in models)
    shuffled = apply_permutation(spec, random_permutation(spec, torch.Generator().manual_seed(1)), state_a)
    params = sum(p.numel() for p in models[0].parameters())
    units = sum(spec.sizes.values())
    rows = []
    for pair, other in (("two inits", state_b), ("shuffled copy", shuffled)):
        walls, cpus, perms = _timed(spec, state_a, other, repeats)
        if pair == "shuffled copy":
            restored = apply_permutation(spec, perms, shuffled)
            assert all(torch.equal(restored[k], state_a[k]) for k in state_a), f"{name}: shuffle not undone"
        rows.append(
            [name, params, len(spec.variables), units, pair, report.median(walls), report.spread(walls),
             report.median(cpus), moved_fraction(perms)]
        )  # fmt: skip
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3, help="timed calls per pair (default 3)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    report.print_header("weight matching, one pair per model (CPU)", {"repeats": args.repeats, "threads": 1})
    rows = [row for name in MODELS for row in _rows(name, args.repeats)]
    headers = ["model", "params", "variables", "units", "pair", "wall s", "wall min..max", "CPU s", "moved"]
    print(report.table(headers, rows))
    print(f"   load average at end: {report.load_average()}{report.busy_note()}")


if __name__ == "__main__":
    main()
