"""ClientApp start-up in a deployed round: how long from a message to the start of training.

In a deployment every message to a SuperNode starts a fresh `flwr-clientapp` process that
imports Flower, torch and fedpfn and builds its data before the first training step; in
the Ray simulation the workers are reused. This measures where that time goes in a real
deployment (`scripts/deploy_local.sh`: SuperLink, SuperNodes, TLS), message by message,
and prints each part beside the deployed round time, as a ratio:

  deliver  message created by the ServerApp -> ClientApp process started: the SuperLink,
           the SuperNode's poll (up to 3 s), SuperExec starting the process
  flwr     process started -> fedpfn's module imported from: Python, Flower's own imports,
           fetching the message and context from the SuperNode
  import   importing fedpfn's ClientApp module (torch, fedpfn, what they pull in)
  dynamo   importing torch._dynamo, which torch.optim does on its first use in a process
           (every optimizer step calls torch._dynamo.graph_break); done up front here so
           that it is not counted as data
  data     handler entered -> first optimizer step: config, dataset, partition, model
  train    first optimizer step -> reply built
  round    the round's wall time on the server (metrics.jsonl `seconds`)

`import` + `data` is the project's own share. The times come from a thin ClientApp that
wraps fedpfn's own (`_startup_trace.py`, added to a temporary copy of the app); training
start is the first call of any optimizer's `step` (a global torch hook), so nothing in
fedpfn is patched. Round 1 also pays for the query that maps partitions to nodes, and a
node's first message writes its partition's cache (fedpfn/runtime/nodedata.py); rounds 2+ are the
steady state. The machine's load moves the figures a lot: `--repeat N` runs N deployments
and prints the median of their rounds-2+ shares, with the load average before each.

  .venv/bin/python benchmarks/bench_clientapp_startup.py                 # 2 nodes, 3 rounds, MLP
  .venv/bin/python benchmarks/bench_clientapp_startup.py --repeat 3      # medians of 3 deployments
  .venv/bin/python benchmarks/bench_clientapp_startup.py --app /tmp/old  # another checkout
  .venv/bin/python benchmarks/bench_clientapp_startup.py -- --node-data partition   # deploy options
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEPLOY = REPO / "scripts" / "deploy_local.sh"
TRACE_ENV = "FEDPFN_STARTUP_TRACE"
SKIP = {".git", ".venv", "runs", "__pycache__", "node_modules", ".pytest_cache", ".coord"}
PARTS = ("deliver", "flwr", "import", "dynamo", "data", "train")

TRACE_MODULE = '''\
"""Times one ClientApp process of fedpfn (benchmarks/bench_clientapp_startup.py wrote this)."""

import json
import os
import time

from flwr.app import Context, Message  # noqa: E402  (flwr-clientapp has imported Flower already)
from flwr.clientapp import ClientApp  # noqa: E402

IMPORT_START = time.time()
from fedpfn.runtime import app as _fedpfn  # noqa: E402  (torch, fedpfn and what they pull in)

IMPORTED = time.time()


def _process_start() -> float:
    """When the kernel started this process (seconds since the epoch)."""
    ticks = int(open("/proc/self/stat").read().rsplit(")", 1)[1].split()[19])
    boot = next(float(l.split()[1]) for l in open("/proc/stat") if l.startswith("btime"))
    return boot + ticks / os.sysconf("SC_CLK_TCK")


def _server_round(msg: Message) -> int:
    """The round a train message belongs to (fedpfn sends it in its config record)."""
    for record in msg.content.config_records.values():
        if "server-round" in record:
            return int(record["server-round"])
    return 0


client_app = ClientApp()


@client_app.train()
def train(msg: Message, context: Context) -> Message:
    dynamo_start = time.time()
    import torch._dynamo  # noqa: F401  (what the first optimizer step would import)

    entered = time.time()
    from torch.optim.optimizer import register_optimizer_step_pre_hook  # loaded by fedpfn.runtime.app

    first_step: list[float] = []
    hook = register_optimizer_step_pre_hook(
        lambda *_: first_step.append(time.time()) if not first_step else None
    )
    try:
        reply = _fedpfn.train(msg, context)
    finally:
        hook.remove()
    done = time.time()
    row = {
        "partition": int(context.node_config["partition-id"]),
        "round": _server_round(msg),
        "created": msg.metadata.created_at,
        "process": _process_start(),
        "import_start": IMPORT_START,
        "imported": IMPORTED,
        "dynamo_start": dynamo_start,
        "entered": entered,
        "first_step": first_step[0] if first_step else done,
        "done": done,
    }
    with open(os.environ["FEDPFN_STARTUP_TRACE"], "a") as f:
        f.write(json.dumps(row) + "\\n")
    return reply


@client_app.query()
def query(msg: Message, context: Context) -> Message:
    return _fedpfn.query(msg, context)
'''


def staged_app(app: Path, into: Path) -> Path:
    """A copy of `app` whose ClientApp is the tracing wrapper around fedpfn's."""
    dst = into / "app"
    skipped = lambda _, names: [n for n in names if n in SKIP or n.endswith(".egg-info")]  # noqa: E731
    shutil.copytree(app, dst, ignore=skipped)
    (dst / "_startup_trace.py").write_text(TRACE_MODULE)
    pyproject = dst / "pyproject.toml"
    wrapped = 'clientapp = "_startup_trace:client_app"'
    text, n = re.subn(r'clientapp = "[^"]+"', wrapped, pyproject.read_text())
    if n != 1:
        sys.exit(f"bench_clientapp_startup: no clientapp component in {pyproject}")
    pyproject.write_text(text)
    return dst


def deploy(app: Path, work: Path, args: argparse.Namespace) -> tuple[list[dict], list[dict]]:
    """Run one deployment; return the trace rows and the run's metrics rows."""
    trace = work / "trace.jsonl"
    env = dict(os.environ, **{TRACE_ENV: str(trace)})
    env["PATH"] = f"{Path(sys.executable).parent}:{env.get('PATH', '')}"
    cmd = [
        "bash", str(DEPLOY), "--app", str(app), "--nodes", str(args.nodes), "--rounds", str(args.rounds),
        "--model", args.model, "--base-port", str(args.base_port), "--work-dir", str(work / "deploy"),
        "--out", str(work / "run"), *args.deploy_args,
    ]  # fmt: skip
    result = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=args.timeout)
    if result.returncode != 0:
        tail = (result.stdout + result.stderr)[-6000:]
        sys.exit(f"deploy_local.sh failed (status {result.returncode}):\n{tail}")
    rows = [json.loads(line) for line in trace.read_text().splitlines()]
    metrics = [json.loads(line) for line in (work / "run" / "metrics.jsonl").read_text().splitlines()]
    return rows, metrics


def parts(row: dict) -> dict[str, float]:
    """Seconds of each part of one message's life on its node."""
    return {
        "deliver": row["process"] - row["created"],
        "flwr": row["import_start"] - row["process"],
        "import": row["imported"] - row["import_start"],
        "dynamo": row["entered"] - row["dynamo_start"],
        "data": row["first_step"] - row["entered"],
        "train": row["done"] - row["first_step"],
    }


def report(rows: list[dict], metrics: list[dict]) -> dict[str, float]:
    """Print each round's parts; return the means of rounds 2+ (seconds; `round`: its length)."""
    round_seconds = {int(m["round"]): float(m["seconds"]) for m in metrics}
    by_round: dict[int, list[dict[str, float]]] = {}
    for row in rows:
        by_round.setdefault(int(row["round"]), []).append(parts(row))
    header = " ".join(f"{p:>13}" for p in (*PARTS, "project"))
    print(f"{'round':>5} {'msgs':>4} {header} {'round s':>8}")
    steady: list[dict[str, float]] = []
    for rnd in sorted(by_round):
        med = {p: statistics.median(r[p] for r in by_round[rnd]) for p in PARTS}
        med["project"] = med["import"] + med["data"]
        total = round_seconds.get(rnd, float("nan"))
        cells = " ".join(f"{med[p]:5.1f}s ({med[p] / total:3.0%})" for p in (*PARTS, "project"))
        print(f"{rnd:>5} {len(by_round[rnd]):>4} {cells} {total:8.2f}")
        if rnd > 1:
            steady.append({**med, "round": total})
    if not steady:
        return {}
    mean = {k: statistics.mean(s[k] for s in steady) for k in steady[0]}
    print(
        f"rounds 2+: round {mean['round']:.2f} s; project share (import + data) "
        f"{mean['project']:.2f} s = {mean['project'] / mean['round']:.0%} of the round; "
        f"Flower's (deliver + flwr) {mean['deliver'] + mean['flwr']:.2f} s = "
        f"{(mean['deliver'] + mean['flwr']) / mean['round']:.0%}; "
        f"torch._dynamo {mean['dynamo']:.2f} s = {mean['dynamo'] / mean['round']:.0%}; "
        f"training {mean['train']:.2f} s = {mean['train'] / mean['round']:.0%}"
    )
    return mean


def load_average() -> str:
    with open("/proc/loadavg") as f:
        return f.read().split()[0]


def summarise(runs: list[dict[str, float]], loads: list[str]) -> None:
    """The median over deployments of each part's share of the round (rounds 2+)."""
    runs = [r for r in runs if r]
    if len(runs) < 2:
        return
    share = {p: statistics.median(r[p] / r["round"] for r in runs) for p in (*PARTS, "project")}
    cells = ", ".join(f"{p} {share[p]:.0%}" for p in (*PARTS, "project"))
    projects = ", ".join(f"{r['project'] / r['round']:.0%}" for r in runs)
    print(
        f"median of {len(runs)} deployments (rounds 2+, shares of the round): {cells}; "
        f"project share per deployment {projects}; round {statistics.median(r['round'] for r in runs):.1f} s; "
        f"load average before each {', '.join(loads)}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--app", type=Path, default=REPO, help="the app to measure (default: this repo)")
    parser.add_argument("--nodes", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--model", default="mlp")
    parser.add_argument("--base-port", type=int, default=9340)
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds for the whole deployment")
    parser.add_argument("--repeat", type=int, default=1, help="deployments to run; medians printed (1)")
    parser.add_argument("--keep", action="store_true", help="keep the work folder (logs, trace)")
    parser.add_argument("deploy_args", nargs="*", help="more deploy_local.sh options, after --")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="fedpfn-startup-"))
    runs, loads = [], []
    try:
        app = staged_app(args.app.resolve(), work)
        for n in range(args.repeat):
            loads.append(load_average())
            print(f"ClientApp start-up, deployed: {args.nodes} nodes, {args.rounds} rounds, {args.model}; "
                  f"app {args.app} {' '.join(args.deploy_args)}; {os.cpu_count()} CPUs, load {loads[-1]}", flush=True)  # fmt: skip
            (work / f"run-{n}").mkdir()
            rows, metrics = deploy(app, work / f"run-{n}", args)
            runs.append(report(rows, metrics))
            sys.stdout.flush()
        summarise(runs, loads)
    finally:
        if args.keep:
            print(f"work folder kept: {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
