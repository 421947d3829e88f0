"""One primitive ensures a run: reused when it finished with the same settings, resumed when it
was stopped, started otherwise; a folder that holds a run of other settings is refused.

`fedpfn compare` (fedpfn.runtime.compare) and `fedpfn study` (fedpfn.study) both go through
`ensure_run`; `run_action` decides, before anything runs, what it would do, so a caller can
plan every run (and refuse every bad folder) before the first starts. `in_use` tells a
running run from a stopped one by its folder's lock (fedpfn.runtime.runfolder).
"""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fedpfn.core.config import PLACEMENT, TRACKERS, ConfigError, RunConfig
from fedpfn.core.files import CONFIG, LOCK, PROVENANCE, DamagedFile, is_finished, read_json
from fedpfn.core.hyper import changed_settings
from fedpfn.runtime.progress import as_part_of_a_comparison
from fedpfn.runtime.simulation import simulate

NOT_COMPARED = ("out", "overwrite", PROVENANCE, *PLACEMENT, *TRACKERS)  # may differ in a reused run
ACTIONS = ("start", "resume", "reuse")


def differences(stored: dict[str, Any], requested: dict[str, Any]) -> list[str]:
    """`lr 0.1 != 0.05`: the stored value, then the requested one, for every differing key but the
    ones a reuse may change (fedpfn.core.hyper.changed_settings compares)."""

    def text(value: Any) -> str:
        return value if isinstance(value, str) else json.dumps(value)

    found = changed_settings(stored, requested, NOT_COMPARED, absent="(absent)")
    return [f"{key} {text(old)} != {text(new)}" for key, old, new in found]


def run_action(cfg: RunConfig) -> str:
    """'start', 'resume' or 'reuse' for the run's folder; ConfigError if it holds another run."""
    folder = cfg.run_dir
    if not (folder / CONFIG).exists():
        return "start"
    try:
        stored = read_json(folder / CONFIG)  # never through a link, never a FIFO, with size and depth limits
    except (OSError, DamagedFile) as err:
        raise ConfigError(f"{folder} holds a damaged {CONFIG} ({err}); use another --out") from None
    if not isinstance(stored, dict):
        raise ConfigError(f"{folder} holds a damaged {CONFIG} (not a JSON object); use another --out")
    found = differences(stored, cfg.to_dict())
    if found:
        raise ConfigError(f"{folder} holds a run with other settings: {', '.join(found)}; use another --out")
    return "reuse" if is_finished(folder) else "resume"


def in_use(folder: Path) -> bool:
    """Whether a process holds the run folder's lock now: a run going on, not a stopped one."""
    try:
        fd = os.open(folder / LOCK, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return False
    with os.fdopen(fd) as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(fh, fcntl.LOCK_UN)
    return False


def ensure_run(cfg: RunConfig, action: str | None = None, heading: Callable[[RunConfig, str], str] | None = None) -> str:
    """A finished run of `cfg` in its folder: reused when it finished with the same settings,
    resumed when it was stopped, started otherwise; a folder of other settings is refused.
    `action`: run_action's answer, when the caller planned it already; `heading`: the line
    printed before a run starts or resumes. Returns what was done."""
    action = run_action(cfg) if action is None else action
    if action == "reuse":
        print(f"{cfg.run_dir}: finished earlier with the same settings, reused", flush=True)
        return action
    said = heading(cfg, action) if heading else f"== {cfg.algorithm} seed {cfg.seed}"
    print(said + (" (resumed)" if action == "resume" else ""), flush=True)
    with as_part_of_a_comparison():  # its next steps are the caller's (a comparison's, a study's)
        simulate(cfg, resume=action == "resume")
    return action
