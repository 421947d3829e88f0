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

    logger = logging.getLogger(flower.FLOWER_LOGGER)
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
    assert flower.DropDeprecationNotice().filter(notice) is False
    other = logging.LogRecord(flower.FLOWER_LOGGER, logging.WARNING, __file__, 1, "Federation ok", None, None)
    assert flower.DropDeprecationNotice().filter(other) is True
