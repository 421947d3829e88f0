"""The engines that train a simulation's clients, by the name `--engine` takes.

An engine prepares a run's placement (resolving and checking what it needs: Ray's
resources, a device), describes it in one header line, and runs the rounds of a claimed
run with the same ServerApp, ServerLoop and strategies (fedpfn.runtime.lifecycle). The
ClientApp is handed to `run` by the simulation above (fedpfn.runtime.simulation): the engines
sit below it (it trains through their program) and never import it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType

from flwr.clientapp import ClientApp

from fedpfn.core.config import RunConfig
from fedpfn.runtime.engines import batched, ray
from fedpfn.runtime.lifecycle import RunPlan
from fedpfn.runtime.tracking import Tracking


@dataclass(frozen=True)
class Engine:
    name: str
    prepare: Callable[[RunConfig], RunConfig]  # placement resolved and checked (ConfigError)
    describe: Callable[[RunConfig], str]  # the header's compute line
    settle: Callable[[RunPlan], tuple[RunPlan, str]]  # what it resolves once the folder is checked, and why
    run: Callable[[RunPlan, Tracking, ClientApp], None]  # the rounds of a claimed run, its clients' app


    @classmethod
    def of(cls, module: ModuleType) -> Engine:
        """The engine a module implements, under its module's name (the name `--engine` takes)."""
        return cls(module.__name__.rpartition(".")[2], module.prepare, module.describe, module.settle, module.run)


# each name is a choice of the `engine` setting (fedpfn.core.config.ENGINES, checked before
# anything imports an engine) and the module that implements it; tests/integration/test_engines.py holds
# the two in step
ENGINES = {engine.name: engine for engine in map(Engine.of, (batched, ray))}
