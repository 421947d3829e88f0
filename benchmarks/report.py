"""What every benchmark prints: the machine, the load average, plain tables and ratios.

The machine is shared, so a figure means little without the load it was taken under:
every benchmark prints the load average at its start, between its parts and at its end.

The benchmarks are scripts (`python benchmarks/bench_x.py`): their folder is the first
entry of `sys.path`, so these helpers are imported as top-level modules (`import report`).
"""

from __future__ import annotations

import math
import os
import platform
import statistics
import sys
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run from anywhere, even without the editable install
    sys.path.insert(1, str(ROOT))


# --- machine and load ------------------------------------------------------------------


def load_average() -> str:
    """The 1, 5 and 15 minute load averages, as `uptime` prints them."""
    one, five, fifteen = os.getloadavg()
    return f"{one:.2f}, {five:.2f}, {fifteen:.2f}"


def machine_line() -> str:
    import torch

    cuda = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no"
    return (
        f"{platform.node()}: {os.cpu_count()} logical CPUs, torch {torch.__version__} "
        f"(default threads {torch.get_num_threads()}), CUDA {cuda}, python {platform.python_version()}"
    )


def busy_note() -> str:
    """A warning when other processes hold the cores: then only side-by-side ratios mean much."""
    cores = os.cpu_count() or 1
    if os.getloadavg()[0] <= cores:
        return ""
    return f" (above the {cores} cores: others compete for them; absolute times are inflated, trust ratios)"


def print_header(title: str, settings: dict[str, Any]) -> None:
    print(f"== {title}")
    print(f"   machine: {machine_line()}")
    print(f"   load average at start: {load_average()}{busy_note()}")
    print("   settings: " + ", ".join(f"{k}={v}" for k, v in settings.items()), flush=True)


def wait_for_quiet(max_load: float, max_wait: float = 600.0) -> None:
    """Wait up to `max_wait` s for the 1-minute load average to drop below `max_load` (0: don't)."""
    if max_load <= 0:
        return
    deadline = time.monotonic() + max_wait
    while os.getloadavg()[0] > max_load and time.monotonic() < deadline:
        time.sleep(5)
    print(f"   load average before measuring: {load_average()}", flush=True)


# --- numbers ---------------------------------------------------------------------------


def median(values: Iterable[float]) -> float:
    """The median of the values that are numbers; NaN when there are none."""
    kept = [v for v in values if not math.isnan(v)]
    return statistics.median(kept) if kept else float("nan")


def spread(values: Iterable[float]) -> str:
    """`min..max`, for showing how noisy a median is."""
    kept = [v for v in values if not math.isnan(v)]
    return f"{min(kept):.3f}..{max(kept):.3f}" if kept else "-"


def ratio(value: float, baseline: float, digits: int = 3) -> str:
    """`value / baseline` as text; '-' when either is missing or the baseline is zero."""
    if math.isnan(value) or math.isnan(baseline) or baseline == 0:
        return "-"
    return f"{value / baseline:.{digits}f}"


def mib(n_bytes: float) -> float:
    return n_bytes / 2**20


def table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    """A plain fixed-width table; floats get 3 decimals unless already formatted."""

    def cell(v: Any) -> str:
        if isinstance(v, float):
            return "nan" if math.isnan(v) else f"{v:.3f}"
        return str(v)

    body = [[cell(v) for v in row] for row in rows]
    widths = [max([len(h), *(len(r[i]) for r in body)]) for i, h in enumerate(headers)]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths)))

    return "\n".join([line(headers), *(line(r) for r in body)])
