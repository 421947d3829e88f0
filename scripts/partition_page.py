"""The data guide's side-by-side label distributions: the project's Dirichlet split and
flwr-datasets' DirichletPartitioner, on Fashion-MNIST, drawn as every run draws its partition.png.

    python scripts/partition_page.py [--out docs/img]

Both splits are what `fedpfn run` would give its clients with the same settings (10 clients,
alpha 0.5, at least 10 samples each, seed 0): `--partition dirichlet` and `--partition
flwr:DirichletPartitioner --partition-args '{"alpha": 0.5, "min_partition_size": 10}'`. Needs
the flwr-datasets extra; writes partition_dirichlet.png and partition_flwr_dirichlet.png (and
their PDFs) into --out.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from fedpfn.core.cache import partition_label_counts  # noqa: E402
from fedpfn.core.data import CLASS_NAMES  # noqa: E402
from fedpfn.runtime.algorithms import load_config  # noqa: E402
from fedpfn.runtime.recording import split_text  # noqa: E402
from partitions.report import plot_partition  # noqa: E402

COMMON = {"dataset": "fmnist", "num_clients": 10, "seed": 0}
SPLITS = {  # file name: the run's partition settings
    "partition_dirichlet.png": {"partition": "dirichlet", "alpha": 0.5, "min_partition_size": 10},
    "partition_flwr_dirichlet.png": {
        "partition": "flwr:DirichletPartitioner",
        "partition_args": '{"alpha": 0.5, "min_partition_size": 10}',
    },
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "img", help="folder for the figures")
    args = parser.parse_args(argv)
    for name, settings in SPLITS.items():
        cfg = load_config({**COMMON, **settings})
        counts = partition_label_counts(cfg)
        title = f"{cfg.federation.num_clients} clients, {split_text(cfg)} · seed {cfg.seed}"
        for path in plot_partition(args.out / name, counts, CLASS_NAMES[cfg.task.dataset], title):
            print(f"written: {path}")
        print(f"{name}: client sizes {counts.sum(axis=1).tolist()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
