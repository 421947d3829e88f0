"""The engines that train a simulation's clients, by the name `--engine` takes.

An engine prepares a run's placement (resolving and checking what it needs: Ray's
resources, a device), describes it in one header line, and runs the rounds of a claimed
run with the same ServerApp, ServerLoop and strategies (fedpfn.runtime.lifecycle).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from fedpfn.core.config import ENGINES as ENGINE_NAMES
from fedpfn.core.config import RunConfig
from fedpfn.runtime.engines import batched, ray
from fedpfn.runtime.lifecycle import RunPlan
from fedpfn.runtime.tracking import Tracking


@dataclass(frozen=True)
class Engine:
    name: str
    prepare: Callable[[RunConfig], RunConfig]  # placement resolved and checked (ConfigError)
    describe: Callable[[RunConfig], str]  # the header's compute line
    run: Callable[[RunPlan, Tracking], None]  # the rounds of a claimed run


ENGINES = {
    engine.name: engine
    for engine in (
        Engine("batched", batched.prepare, batched.describe, batched.run),
        Engine("ray", ray.prepare, ray.describe, ray.run),
    )
}
assert set(ENGINES) == set(ENGINE_NAMES)
