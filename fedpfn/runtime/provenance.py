"""Where a run's numbers came from: the command, host and time, beside the code version, packages
and machine (fedpfn.core.provenance).

Saved as `provenance` in `config.json` beside the settings (never part of them: the checkpoint
fingerprint and `RunConfig` ignore it), so a figure can be traced to the commit and machine
that made it. Every probe is best effort: a value that cannot be found is null, never an error.
"""

from __future__ import annotations

import shlex
import socket
import sys
from datetime import datetime, timezone
from typing import Any

from fedpfn.core import provenance as core


def collect(engine: str, first_round: int, argv: list[str] | None = None) -> dict[str, Any]:
    """The code and machine (fedpfn.core.provenance.collect) for this process, stamped with the
    time it started, what ran its clients (`engine`: batched, ray or deployment) and the first
    round it ran."""
    return {
        "started": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "engine": engine,
        "first_round": first_round,
        "command": shlex.join(sys.argv if argv is None else argv),
        "host": socket.gethostname(),
        **core.collect(),
    }


def for_resume(
    previous: dict[str, Any], engine: str, first_round: int, argv: list[str] | None = None
) -> dict[str, Any]:
    """The first process's provenance, with this one appended to `resumes`: a run may be
    continued on another engine, and each entry says which rounds it ran from."""
    if not previous:
        return collect(engine, first_round, argv)
    return {**previous, "resumes": [*previous.get("resumes", []), collect(engine, first_round, argv)]}
