"""run_sim.py against `flwr run .`: the same experiment through the two routes, start to finish.

run_sim.py starts its simulation through `flwr.simulation.run_simulation`, which Flower 1.42
marks deprecated in favour of `flwr run`; this measures what the supported route costs here.
Both run configs/quickstart.toml (4 clients, 2 a round, 2 rounds, MLP) into fresh folders,
alternating, `--reps` times each. `flwr run` goes to a simulation SuperLink started once
beforehand (tests/support/flower_link.py, as the suite's flower-route tests use it), so its own
start-up is not counted; the federation is `num-supernodes=4 client-resources-num-cpus=1`.

Two times per run, from launching the command: to the first line of the run's metrics.jsonl
(round 1 done: start-up plus one round) and to the command's exit. Printed side by side with
the ratio flwr run / run_sim.py of the medians.

  .venv/bin/python benchmarks/bench_routes.py            # 3 runs each (about 8 min on 2 cores)
  .venv/bin/python benchmarks/bench_routes.py --reps 1   # a quick look
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import report  # noqa: F401  (puts the repository root on sys.path)

from fedpfn.core.files import is_finished
from tests.support.flower_link import BIN, Link, simulation_superlink

QUICKSTART = report.ROOT / "configs" / "quickstart.toml"
FEDERATION = "num-supernodes=4 client-resources-num-cpus=1"
RUN_TIMEOUT = 600.0


def timed(command: list[str], out: Path, env: dict[str, str] | None = None) -> tuple[float, float]:
    """Seconds from launch to the first metrics row in `out`, and to the command's exit."""
    metrics = out / "metrics.jsonl"
    start = time.monotonic()
    process = subprocess.Popen(command, cwd=report.ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    first_round = float("nan")
    while process.poll() is None:
        if first_round != first_round and metrics.exists() and metrics.read_text().strip():
            first_round = time.monotonic() - start
        if time.monotonic() - start > RUN_TIMEOUT:
            process.kill()
            raise SystemExit(f"bench_routes: {command[0]} ran past {RUN_TIMEOUT:.0f} s")
        time.sleep(0.1)
    total = time.monotonic() - start
    if process.returncode != 0 or not is_finished(out):
        raise SystemExit(f"bench_routes: {' '.join(command[:3])} … failed (exit {process.returncode}, no summary)")
    return first_round, total


def run_sim(out: Path) -> tuple[float, float]:
    return timed([sys.executable, "run_sim.py", "--config", str(QUICKSTART), "--out", str(out)], out)


def flwr_run(link: Link, out: Path, scratch: Path) -> tuple[float, float]:
    preset = scratch / f"{out.name}.toml"  # the preset with its own `out`, passed as a file like users do
    kept = [line for line in QUICKSTART.read_text().splitlines() if not line.startswith("out =")]
    preset.write_text("\n".join([*kept, f"out = {json.dumps(str(out))}", ""]))
    command = [str(BIN / "flwr"), "run", ".", "--run-config", str(preset), "--federation-config", FEDERATION, "--stream"]
    return timed(command, out, env=link.env)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=3, help="runs through each route (default 3)")
    parser.add_argument("--quiet-load", type=float, default=0.0, help="wait for the load average to fall below this")
    args = parser.parse_args()
    if args.reps < 1:
        parser.error(f"--reps {args.reps}: give 1 or more")
    report.print_header("run_sim.py vs flwr run (configs/quickstart.toml)", {"reps": args.reps, "federation": FEDERATION})
    report.wait_for_quiet(args.quiet_load)
    times: dict[str, list[tuple[float, float]]] = {"run_sim.py": [], "flwr run": []}
    with tempfile.TemporaryDirectory(prefix="bench-routes-") as tmp:
        scratch = Path(tmp)
        with simulation_superlink(scratch / "superlink") as link:
            for rep in range(args.reps):
                times["run_sim.py"].append(run_sim(scratch / f"sim-{rep}"))
                times["flwr run"].append(flwr_run(link, scratch / f"flwr-{rep}", scratch))
                print(f"   rep {rep + 1}: run_sim {times['run_sim.py'][-1][1]:.1f} s, flwr run "
                      f"{times['flwr run'][-1][1]:.1f} s; load {report.load_average()}", flush=True)  # fmt: skip
    medians = {route: [report.median(t[i] for t in runs) for i in (0, 1)] for route, runs in times.items()}
    rows = [
        [route, ", ".join(f"{t[0]:.0f}" for t in runs), f"{medians[route][0]:.1f}",
         ", ".join(f"{t[1]:.0f}" for t in runs), f"{medians[route][1]:.1f}"]
        for route, runs in times.items()
    ]  # fmt: skip
    print(report.table(["route", "to round 1 (s)", "median", "to exit (s)", "median"], rows))
    sim, flwr = medians["run_sim.py"], medians["flwr run"]
    print(f"flwr run / run_sim.py, medians: to round 1 {report.ratio(flwr[0], sim[0], 2)}, "
          f"to exit {report.ratio(flwr[1], sim[1], 2)}")  # fmt: skip
    print(f"   load average at end: {report.load_average()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
