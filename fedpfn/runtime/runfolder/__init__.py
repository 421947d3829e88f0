"""A run is a folder: resolved config, metrics per round, summary, plots, checkpoints.

What a run folder guarantees:
- `config.json` is written when a run is claimed and is what its numbers came from, with
  a `provenance` object beside the settings (fedpfn.runtime.provenance; `read_config` leaves it out);
  `summary.json` is written last (atomically), so its presence marks a finished run.
- `run.log` is what the terminal showed (fedpfn.runtime.progress), appended by every process of the run.
- `metrics.jsonl` has one strict-JSON line per finished round (no bare NaN), rounds 1..n
  in order; a line cut by a kill is the only damage tolerated, and only at the end.
- `checkpoint.npz` holds arrays and plain values only (never pickles), is replaced
  atomically, and names the settings it belongs to: a checkpoint from other settings is
  refused, never resumed.
- The folder is held by one process at a time (`.fedpfn.lock`, removed when it ends).
- The tool touches only its own files: a folder holding anything else is refused, and
  `--overwrite` removes exactly the files the tool writes (fedpfn.core.files.is_own), never
  a user's file that looks like one.
- Nothing is written or read through a link inside the folder: a folder holding a symbolic
  link (W&B's own inside `wandb/` aside), a file with another name (a hard link), or anything
  that is neither a file nor a folder (a FIFO, a device) is refused before anything is touched.
- A run folder is never made inside /dev (bar /dev/shm), /proc or /sys, however `--out` reaches it.
- Every file is read with size and nesting limits (fedpfn.core.files.read_limited), and
  what a resume reads back (metric rows, the checkpoint's round, model and arrays) is
  checked before it is used.

How it is built: one class, `RunFolder`, composed of one mixin per concern, each its own
module: `folder` (the path, the walk, the tool's own files), `checks` (refusals before
anything is touched, and the lock), `config`, `metrics`, `checkpoints`, `outputs`. Mixins
rather than collaborators (`folder.metrics.read()`) because every caller already holds one
`RunFolder` and asks it directly; the split changes where the code lives, not how it is
called. The two methods that tie concerns together live here: `writing` (a round's rows
stand or fall with its checkpoint) and `stop_message` (the rows read against the checkpoint).
Trees of arrays are saved and read by `fedpfn.core.tree`, the serialiser strategies/ share.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterator
from contextlib import contextmanager, suppress

from fedpfn.core.files import is_own
from fedpfn.core.tree import read_tree, read_tree_index, tree_bytes
from fedpfn.core.hyper import flat_view
from fedpfn.core.user_code import CODE_SETTINGS, code_paths
from fedpfn.runtime.runfolder.checkpoints import FolderCheckpoints, checkpoint_bytes, checkpoint_problem, fingerprint_hash
from fedpfn.runtime.runfolder.config import FolderConfig
from fedpfn.runtime.runfolder.folder import RunFolderError, RunWriteError
from fedpfn.runtime.runfolder.metrics import ROW_CHECKS, FolderMetrics, row_problem
from fedpfn.runtime.runfolder.outputs import FolderOutputs

__all__ = [
    "ROW_CHECKS",
    "RunFolder",
    "RunFolderError",
    "RunWriteError",
    "checkpoint_bytes",
    "checkpoint_problem",
    "fingerprint_hash",
    "is_own",
    "read_tree",
    "read_tree_index",
    "row_problem",
    "tree_bytes",
]


class RunFolder(FolderConfig, FolderMetrics, FolderCheckpoints, FolderOutputs):
    """A run folder: its checks and lock, config, metrics, checkpoints and outputs (see above)."""

    @contextmanager
    def writing(self) -> Iterator[None]:
        """Writes that stand or fall together (a round's rows and its checkpoint).

        If one fails (a full disk, a folder made read-only), the metrics files lose what the
        block appended, so no row is ahead of the checkpoint, and RunWriteError names the
        file and the command that continues the run once it can be written.
        """
        before = self.sizes()
        try:
            yield
        except OSError as err:
            with suppress(OSError):
                self.truncate_to(before)
            where = err.filename or f"into {self.path}"
            reason = err.strerror or str(err)
            raise RunWriteError(f"cannot write {where} ({reason}); {self.stop_message()}") from None

    def resume_command(self, *more: str) -> str:
        """`fedpfn resume DIR`, shell-quoted, with the classes its config.json names by dotted path:
        fedpfn imports those only when the command names them again (fedpfn.core.user_code)."""
        try:
            config = flat_view(self.read_config())  # a plug-in's by name (plugins.server_wrap: core.hyper)
        except RunFolderError:
            config = {}
        named = [name for name in CODE_SETTINGS if code_paths(config.get(name))]
        flags = [f"--{name.replace('_', '-')} {shlex.quote(config[name])}" for name in named]
        return " ".join(["fedpfn resume", shlex.quote(str(self.path)), *flags, *more])

    def stop_message(self) -> str:
        """What a stopped run prints: where it stopped and how it continues."""
        try:
            done = len(self.read_metrics())
        except RunFolderError:
            done = 0
        line = f"stopped after round {done}" if done else "stopped before its first round finished"
        line += f"; continue with: {self.resume_command()}"
        restart = self.checkpoint_round()
        if restart < done:
            line += f" (from its checkpoint of round {restart})" if restart else " (from round 1: no checkpoint yet)"
        return line
