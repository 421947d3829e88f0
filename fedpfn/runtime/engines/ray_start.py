"""Ray started or joined from an empty folder of its own, every time fedpfn starts it.

Ray puts the driver's current folder first on every worker's `sys.path`, so a `torch.py` left
in the folder a user runs from would shadow torch in the workers (and a run would hang on it).
Started from an empty folder, the workers search nothing of the user's before the installed
packages: a user's own module (a client rule or strategy by dotted path, whose folder the
driver appended to its `sys.path`) reaches them through PYTHONPATH, which keeps the driver's
order, the current folder moved last (fedpfn.runtime.children: every child fedpfn starts gets
that path). A worker then enters the driver's folder before it reads anything
(`enter_driver_folder`), so a relative data root or start file means what it meant to the
command; its imports are settled by then, and none of them searches that folder first.
"""

from __future__ import annotations

import atexit
import logging
import os
import shutil
import tempfile
from typing import Any

from fedpfn.runtime.children import child_pythonpath

DRIVER_FOLDER = "FEDPFN_DRIVER_FOLDER"  # the folder the command ran in, for the workers


def enter_driver_folder() -> None:
    """In a worker Ray started for fedpfn: into the driver's folder (elsewhere: nothing)."""
    folder = os.environ.get(DRIVER_FOLDER)
    if folder and os.getcwd() != folder and os.path.isdir(folder):  # another node may lack it
        os.chdir(folder)


def init_ray(**init_args: Any) -> None:
    """`ray.init(**init_args)` from an empty folder, the workers given `child_pythonpath`; once."""
    import ray

    if ray.is_initialized():
        return
    logging.getLogger("ray").setLevel(logging.ERROR)
    empty = tempfile.mkdtemp(prefix="fedpfn-ray-")
    atexit.register(shutil.rmtree, empty, ignore_errors=True)
    pythonpath = child_pythonpath()
    here = os.getcwd()
    os.chdir(empty)
    try:
        quiet = {"logging_level": logging.ERROR, "log_to_driver": False}
        env_vars = {"PYTHONPATH": pythonpath, DRIVER_FOLDER: here}
        ray.init(**{**quiet, **init_args}, runtime_env={"env_vars": env_vars})
    finally:
        os.chdir(here)
