"""The deprecated Flower call run_sim.py stands on (fedpfn/runtime/flower.py): still there, still worded so.

These fail the day Flower removes `flwr.simulation.run_simulation`, renames the arguments
fedpfn passes, or rewords the deprecation notice fedpfn.runtime.flower drops: then move run_sim.py
onto `flwr run` (see fedpfn/runtime/flower.py for the measurement that kept it here).
"""

from __future__ import annotations

import inspect
import logging

import pytest
from flwr.clientapp import ClientApp
from flwr.serverapp import ServerApp

from fedpfn.core.flower_notes import FLOWER_LOGGER, NO_FEDERATED_EVALUATION, DropFlowerNote
from fedpfn.runtime import flower


class Reached(Exception):
    """Raised from the logger on Flower's first record, so nothing starts."""


class StopAtFirstRecord(logging.Filter):
    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def filter(self, record: logging.LogRecord) -> bool:
        self.records.append(record)
        raise Reached


def test_run_simulation_still_exists_with_the_arguments_fedpfn_passes():
    from flwr.simulation import run_simulation

    passed = set(inspect.signature(flower.run_simulation).parameters)
    accepted = inspect.signature(run_simulation).parameters
    assert passed <= set(accepted), f"Flower no longer accepts {sorted(passed - set(accepted))}"


def test_the_deprecation_notice_is_the_one_fedpfn_drops():
    """Flower's first record on calling run_simulation is the notice, and fedpfn's filter drops it."""
    from flwr.simulation import run_simulation

    logger = logging.getLogger(FLOWER_LOGGER)
    stop, level = StopAtFirstRecord(), logger.level
    logger.addFilter(stop)
    logger.setLevel(logging.DEBUG)  # a simulation run earlier in this process may have quietened it
    try:
        with pytest.raises(Reached):
            run_simulation(
                server_app=ServerApp(), client_app=ClientApp(), num_supernodes=1, backend_config={}
            )
    finally:
        logger.removeFilter(stop)
        logger.setLevel(level)
    notice = stop.records[0]
    assert flower.DEPRECATION in notice.getMessage(), notice.getMessage()
    assert notice.levelno == logging.WARNING
    assert DropFlowerNote(flower.DEPRECATION).filter(notice) is False
    other = logging.LogRecord(FLOWER_LOGGER, logging.WARNING, __file__, 1, "Federation ok", None, None)
    assert DropFlowerNote(flower.DEPRECATION).filter(other) is True


class Notes(logging.Handler):
    """Flower's records, as its console would print them."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


@pytest.fixture
def flower_notes():
    """Every record on Flower's logger while the test runs (a simulation may have quietened it)."""
    logger, notes = logging.getLogger(FLOWER_LOGGER), Notes()
    level = logger.level
    logger.setLevel(logging.DEBUG)
    logger.addHandler(notes)
    yield notes.lines
    logger.removeHandler(notes)
    logger.setLevel(level)


def test_flowers_note_on_fraction_evaluate_is_not_shown_for_fedpfns_own_choice(flower_notes):
    """fedpfn sets fraction_evaluate=0.0 itself (it samples and evaluates on the server): Flower's
    `WARNING: fraction_evaluate is set to 0.0` meant nothing to a user of a custom strategy (issue 56)."""
    from flwr.serverapp.strategy import FedAvg

    from fedpfn.core.user_code import name_code
    from strategies.registry import SERVER_RULES, ServerOptParams, build_user_strategy

    FedAvg(fraction_evaluate=0.0)  # Flower's wording, still what fedpfn drops
    assert any(NO_FEDERATED_EVALUATION in line for line in flower_notes), flower_notes
    flower_notes.clear()
    SERVER_RULES["fedadam"].build(ServerOptParams())
    name_code("flwr.serverapp.strategy:Krum")  # as --server on a command line names it
    build_user_strategy("flwr.serverapp.strategy:Krum", '{"num_malicious_nodes": 0}')
    assert not any(NO_FEDERATED_EVALUATION in line for line in flower_notes), flower_notes
