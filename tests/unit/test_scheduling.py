"""`make test`'s scheduler (tests/conftest.py, tests/support/scheduling.py): a module with a
module-scoped fixture is one unit, and the units holding a test marked slow start first, read
from the tests' own source."""

from __future__ import annotations

from tests.support.scheduling import builds_a_module_fixture, is_slow, slow_first

BROWSER = "tests/integration/test_site_browser.py::test_every_table_of_every_page_is_whole_at_1280_px"
SIMULATION = "tests/integration/test_simulation.py"


def test_a_test_marked_slow_is_told_from_its_source_with_its_parameters_or_other_marks():
    assert is_slow(BROWSER)  # @pytest.mark.slow, then a skipif, then the function
    quick = "tests/integration/test_site_browser.py::test_a_page_the_site_lacks_is_named_not_measured"
    assert not is_slow(quick)
    docs = "tests/integration/test_docs_site.py::test_a_command_that_cannot_run_here_is_checked_and_listed"
    assert is_slow(f"{docs}[docs/lmc.md: fedpfn align --help]")  # a parametrized one, by its function
    assert is_slow(f"{SIMULATION}::test_kill_9_before_the_first_checkpoint_resumes_from_round_1")
    sigterm = "test_sigterm_exits_143_within_20_s_with_the_resume_line_and_stops_ray[mid-run]"
    assert is_slow(f"tests/integration/test_reliability.py::{sigterm}")  # marked in its case's pytest.param
    assert not is_slow("tests/no/such_module.py::test_x")


def test_slow_units_start_first_and_the_rest_keep_xdists_order():
    assert builds_a_module_fixture(SIMULATION) and not builds_a_module_fixture(BROWSER.split("::")[0])
    quick = "tests/unit/test_stats.py::test_x"
    kill = f"{SIMULATION}::test_kill_9_before_the_first_checkpoint_resumes_from_round_1"
    whole = (SIMULATION, {kill: False})
    units = [("tests/unit/test_lmc.py", {"tests/unit/test_lmc.py::test_x": False}), (quick, {quick: False}),
             whole, (BROWSER, {BROWSER: False})]  # fmt: skip
    assert [scope for scope, _ in slow_first(units)] == [SIMULATION, BROWSER, "tests/unit/test_lmc.py", quick]
