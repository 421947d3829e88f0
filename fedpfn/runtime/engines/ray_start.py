"""Ray started or joined from an empty folder of its own, every time fedpfn starts it.

Ray puts the driver's current folder first on every worker's `sys.path`, so a `torch.py` left
in the folder a user runs from would shadow torch in the workers (and a run would hang on it).
Started from an empty folder, the workers search nothing of the user's before the installed
packages: a user's own module (a client rule or strategy by dotted path, whose folder the
driver appended to its `sys.path`) reaches them through PYTHONPATH, which keeps the driver's
order, the current folder moved last. A worker then enters the driver's folder before it reads
anything (`enter_driver_folder`), so a relative data root or start file means what it meant to
the command; its imports are settled by then, and none of them searches that folder first.
"""

from __future__ import annotations

import atexit
import logging
import os
import shutil
import sys
import tempfile
from typing import Any

DRIVER_FOLDER = "FEDPFN_DRIVER_FOLDER"  # the folder the command ran in, for the workers


def enter_driver_folder() -> None:
    """In a worker Ray started for fedpfn: into the driver's folder (elsewhere: nothing)."""
    folder = os.environ.get(DRIVER_FOLDER)
    if folder and os.getcwd() != folder and os.path.isdir(folder):  # another node may lack it
        os.chdir(folder)


def worker_pythonpath() -> str:
    """The driver's `sys.path` for the workers, with the current folder (and '') moved last."""
    here = os.path.realpath(os.getcwd())
    entries = [p for p in sys.path if p]
    current = [p for p in entries if os.path.realpath(p) == here]
    return os.pathsep.join([p for p in entries if p not in current] + current[:1])


def init_ray(**init_args: Any) -> None:
    """`ray.init(**init_args)` from an empty folder, the workers given `worker_pythonpath`; once."""
    import ray

    if ray.is_initialized():
        return
    logging.getLogger("ray").setLevel(logging.ERROR)
    empty = tempfile.mkdtemp(prefix="fedpfn-ray-")
    atexit.register(shutil.rmtree, empty, ignore_errors=True)
    pythonpath = worker_pythonpath()
    here = os.getcwd()
    os.chdir(empty)
    try:
        quiet = {"logging_level": logging.ERROR, "log_to_driver": False}
        env_vars = {"PYTHONPATH": pythonpath, DRIVER_FOLDER: here}
        ray.init(**{**quiet, **init_args}, runtime_env={"env_vars": env_vars})
    finally:
        os.chdir(here)
