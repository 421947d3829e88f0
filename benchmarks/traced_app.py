"""fedpfn's ClientApp, traced: which actor process ran each message, and its GPU memory.

The run's own records say how long each client trained (clients.jsonl `train_seconds`)
but not which Ray actor trained it, so they cannot tell the busiest actor of a round, nor
when the partition queries were answered. `traced_client_app` calls fedpfn's own `train`
and `query` unchanged and appends one JSON line per call to a file per process in the
folder named by $FEDPFN_BENCH_TRACE_DIR (unset: nothing is written).

It runs inside the Ray actors: Flower's Ray backend gives the workers the driver's
`sys.path`, so they import this module by the same name the script did.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from flwr.app import Context, Message
from flwr.clientapp import ClientApp

TRACE_ENV = "FEDPFN_BENCH_TRACE_DIR"

traced_client_app = ClientApp()


@traced_client_app.train()
def train(msg: Message, context: Context) -> Message:
    from fedpfn.runtime import client_app as app
    from fedpfn.core import protocol

    reply = app.train(msg, context)
    _trace(
        {
            "pid": os.getpid(),
            "partition": int(context.node_config[protocol.PARTITION_ID]),
            "round": int(msg.content.config_records[protocol.CONFIG][protocol.SERVER_ROUND]),
            "end": time.time(),
            **gpu_peaks(),
        }
    )
    return reply


@traced_client_app.query()
def query(msg: Message, context: Context) -> Message:
    from fedpfn.runtime import client_app as app

    start = time.perf_counter()
    reply = app.query(msg, context)
    _trace({"pid": os.getpid(), "query": True, "seconds": time.perf_counter() - start, "end": time.time()})
    return reply


def gpu_peaks() -> dict[str, int]:
    """This process's CUDA allocator peaks so far; nothing when it has not used CUDA."""
    import torch

    if not torch.cuda.is_available() or not torch.cuda.is_initialized():
        return {}
    return {
        "cuda_max_allocated": int(torch.cuda.max_memory_allocated()),
        "cuda_max_reserved": int(torch.cuda.max_memory_reserved()),
    }


def _trace(row: dict[str, Any]) -> None:
    folder = os.environ.get(TRACE_ENV)
    if folder:
        with open(Path(folder) / f"{os.getpid()}.jsonl", "a") as fh:
            fh.write(json.dumps(row) + "\n")


def read_traces(folder: Path) -> list[dict[str, Any]]:
    """Every line the actors wrote into `folder`."""
    rows: list[dict[str, Any]] = []
    for path in sorted(folder.glob("*.jsonl")):
        rows += [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return rows
