#!/usr/bin/env python
"""Fixed-seed reference runs: a change that claims "numbers unchanged" is checked with this.

    python scripts/reference_metrics.py OUT                    # every reference on every engine mode
    python scripts/reference_metrics.py OUT --check            # ... and compare with the stored references
    python scripts/reference_metrics.py OUT --record           # store them (tests/integration/reference_metrics.json)
    python scripts/reference_metrics.py OUT --modes vmap --only fedavg,moon --check

Each reference (the MLP under every client rule, one run each of the CNN and ResNet-20) runs
through `fedpfn run` on a tiny setting, once per engine mode (`--engine ray`, and the batched
engine's processes, threads, loop and vmap modes; processes is checked against threads' rows,
whose numbers it promises), into OUT/MODE/NAME; a finished run there is reused. Its
metrics.jsonl less the clock's fields is the reference. The stored file keeps each one's rows and
the machine that made them, and `--check` asks for the same rows bit for bit on that machine (the
same CPU kind, torch, numpy and thread count). Another machine rounds its sums differently, and
rounding grows over rounds (here the vmap mode's accuracies differ from the threads mode's by up
to 2.3 points at round 3), so no tolerance would tell a change from it: there, `--check` is
refused; record before the change and check after it on one machine
(`--record before.json` at the old commit, `--check before.json` at the new).
tests/integration/test_reference_metrics.py holds a part of it in the suite.
"""

from __future__ import annotations

import contextlib
import io
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from fedpfn.core.files import METRICS, atomic_write_bytes, read_json, read_jsonl  # noqa: E402
from fedpfn.core.flags import OneLineParser  # noqa: E402
from fedpfn.core.provenance import cpu_id, cpu_model, package_versions  # noqa: E402
from fedpfn.core.settings import ConfigError  # noqa: E402

STORED = ROOT / "tests" / "integration" / "reference_metrics.json"
COMMON = [
    "--dataset", "fmnist", "--model", "mlp", "--num-clients", "4", "--clients-per-round", "2",
    "--rounds", "3", "--partition", "dirichlet", "--alpha", "0.5", "--seed", "7",
]  # fmt: skip
REFERENCES = {
    "fedavg": [],
    "fedprox": ["--algorithm", "fedprox"],
    "scaffold": ["--algorithm", "scaffold"],
    "feddyn": ["--algorithm", "feddyn"],
    "fedpfn": ["--algorithm", "fedpfn"],
    "fedpnu": ["--algorithm", "fedpnu"],
    "fedpfn+scaffold": ["--algorithm", "fedpfn+scaffold"],
    "moon": ["--algorithm", "moon"],
    # the paper's CNN, and a BatchNorm model (buffers, 0-d counters) on smaller partitions
    "cnn-fedpfn+fedprox": ["--algorithm", "fedpfn+fedprox", "--model", "cnn", "--num-clients", "20"],
    "resnet20-fedpnu+feddyn": [
        "--algorithm", "fedpnu+feddyn", "--model", "resnet20", "--num-clients", "60", "--batch-size", "128",
    ],
}  # fmt: skip
MODES = {  # engine mode: its flags
    "ray": ["--engine", "ray"],
    "processes": ["--engine", "batched", "--engine-mode", "processes"],
    "threads": ["--engine", "batched", "--engine-mode", "threads"],
    "loop": ["--engine", "batched", "--engine-mode", "loop"],
    "vmap": ["--engine", "batched", "--engine-mode", "vmap"],
}
# a mode that promises another's numbers bit for bit is checked against that one's stored rows
# where it has none of its own
PROMISES = {"processes": "threads"}
CLOCK = ("seconds",)  # what a clock writes into a metrics row
THREADS = 2  # torch's threads for every reference (the vmap mode and the server's evaluation sum on them)


def machine() -> dict[str, Any]:
    """What decides the last bits of a run's sums here: the CPU's kind, torch and numpy, torch's threads."""
    import torch

    versions = package_versions()
    return {"cpu": cpu_model(), "cpu_id": cpu_id(), "torch": versions["torch"], "numpy": versions["numpy"],
            "threads": torch.get_num_threads()}  # fmt: skip


def rows_of(folder: Path) -> list[dict[str, Any]]:
    """A finished run's metrics rows without the clock's fields."""
    return [{k: v for k, v in row.items() if k not in CLOCK} for row in read_jsonl(folder / METRICS)]


def reference_run(out: Path, mode: str, name: str) -> Path:
    """OUT/MODE/NAME, finished: through fedpfn.runtime.ensure, the one primitive (reused when it
    finished with the same settings, resumed when stopped, refused when it holds other settings);
    its lines kept to show where it stopped."""
    from fedpfn.cli.simulate import checked_config, parse_args
    from fedpfn.runtime.ensure import ensure_run

    folder = out / mode / name
    log = io.StringIO()
    try:
        with contextlib.redirect_stdout(log):
            flags = [*COMMON, *REFERENCES[name], *MODES[mode], "--out", str(folder)]
            ensure_run(checked_config(parse_args(flags)))
    except ConfigError as err:
        said = log.getvalue()[-2000:]
        raise SystemExit(f"reference_metrics: {name} on {mode} stopped: {err}\n{said}") from None
    return folder


def differences(now: list[dict[str, Any]], before: list[dict[str, Any]]) -> list[str]:
    """Every value that differs between two runs' rows, round by round."""
    if len(now) != len(before):
        return [f"{len(now)} rounds against {len(before)}"]
    return [f"round {number} {key}: {row.get(key)!r} against {old.get(key)!r}"
            for number, (row, old) in enumerate(zip(now, before), start=1)
            for key in sorted(set(row) | set(old)) if row.get(key) != old.get(key)]  # fmt: skip


def check(found: dict[str, dict[str, list]], stored: dict[str, Any]) -> list[str]:
    """One line per run that differs from the stored references, or a missing one."""
    lines = []
    for mode, runs in found.items():
        for name, rows in runs.items():
            before = stored["modes"].get(mode, {}).get(name) or stored["modes"].get(PROMISES.get(mode), {}).get(name)
            if before is None:
                lines.append(f"{mode}/{name}: no stored reference (--record stores one)")
            elif diff := differences(rows, before):
                lines.append(f"{mode}/{name}: " + "; ".join(diff[:3]) + (f" (+{len(diff) - 3} more)" if len(diff) > 3 else ""))
    return lines


def chosen(parser: OneLineParser, value: str, known: dict[str, Any], what: str) -> list[str]:
    """The names a comma-separated flag gives (default every one); an unknown one refused in one line."""
    names = value.split(",") if value else list(known)
    if unknown := [n for n in names if n not in known]:
        parser.error(f"{what} {', '.join(unknown)} unknown; one of {', '.join(known)}")
    return names


def main(argv: list[str] | None = None) -> int:
    parser = OneLineParser(prog="python scripts/reference_metrics.py", description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("out", type=Path, help="where the runs go (OUT/MODE/NAME), reused when finished")
    parser.add_argument("--modes", default="", help=f"comma-separated engine modes (default every one: {', '.join(MODES)})")
    parser.add_argument("--only", default="", help="comma-separated references (default every one)")
    parser.add_argument("--check", nargs="?", const=STORED, type=Path, help="compare with stored references (default file: %(const)s)")
    parser.add_argument("--record", nargs="?", const=STORED, type=Path, help="store these runs' references (merged into the file)")
    args = parser.parse_args(argv)
    modes, names = chosen(parser, args.modes, MODES, "mode"), chosen(parser, args.only, REFERENCES, "reference")
    import torch

    torch.set_num_threads(THREADS)  # whatever this machine's cores or OMP_NUM_THREADS say
    here = machine()
    if args.check is not None and not args.check.is_file():
        parser.error(f"--check: {args.check} is not a file (--record writes one)")
    for given in (args.check, args.record):
        if given is not None and given.exists() and (made := read_json(given)["machine"]) != here:
            parser.error(f"{given} was made on {made}, this is {here}: another machine's sums round differently; "
                         "record before the change and check after it on one machine")  # fmt: skip
    found = {mode: {name: rows_of(reference_run(args.out, mode, name)) for name in names} for mode in modes}
    for mode, runs in found.items():
        for name, rows in runs.items():
            print(f"{mode:>7} {name:>22}: " + "  ".join(f"{100 * r['test_accuracy']:.2f} %/{r['test_loss']:.17g}" for r in rows))
    if args.record:
        stored = read_json(args.record) if args.record.exists() else {"machine": here, "modes": {}}
        for mode, runs in found.items():
            stored["modes"].setdefault(mode, {}).update(runs)
        atomic_write_bytes(args.record, (json.dumps(stored, indent=1, sort_keys=True) + "\n").encode())
        print(f"recorded {sum(map(len, found.values()))} references in {args.record}")
    if args.check is None:
        return 0
    lines = check(found, read_json(args.check))
    print("\n".join(lines) if lines else f"identical to {args.check}")
    return 1 if lines else 0


if __name__ == "__main__":
    sys.exit(main())
