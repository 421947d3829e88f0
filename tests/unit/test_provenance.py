"""Every result file says which code, libraries and machine made it, and a page that mixes machines says so
(fedpfn.core.provenance)."""

from __future__ import annotations

from typing import Any


from fedpfn.core import provenance
from fedpfn.runtime import provenance as run_provenance
from tests.support.checks import assert_provenance


def test_a_provenance_names_the_commit_libraries_cpu_and_threads() -> None:
    assert_provenance(provenance.collect())
    assert provenance.cpu_model()  # /proc/cpuinfo's model name here, platform.processor() elsewhere


def test_the_cpu_model_falls_back_to_platform_processor(monkeypatch) -> None:
    def no_file(*args: Any, **kwargs: Any) -> Any:
        raise OSError("no /proc here")

    monkeypatch.setattr("builtins.open", no_file)
    monkeypatch.setattr(provenance.platform, "processor", lambda: "arm")
    assert provenance.cpu_model() == "arm"


def test_a_runs_provenance_is_the_core_one_and_the_run(monkeypatch) -> None:
    found = run_provenance.collect("batched", 1, ["fedpfn", "run"])
    assert_provenance(found)
    assert (found["engine"], found["first_round"], found["command"]) == ("batched", 1, "fedpfn run")


def test_a_page_says_when_its_results_come_from_more_than_one_machine() -> None:
    here = provenance.collect()
    there = {**here, "device": {**here["device"], "cpu": "Another CPU", "cpu_id": None, "torch_threads": 64}}
    newer = {**here, "packages": {**here["packages"], "torch": "9.9.9"}}
    other_kind = {**here, "device": {**here["device"], "cpu_id": "vendor_id X cpu family 1, AVX2"}}  # one name, two kinds
    assert provenance.machines_sentence([here, dict(here)]) == ""  # one machine: nothing to say
    said = provenance.machines_sentence([here, there, here])
    assert said.startswith("The results on this page come from 2 machines") and "Another CPU (" in said
    assert "64 torch threads" in said and "come from 2" in provenance.machines_sentence([here, newer])
    assert "AVX2] (" in provenance.machines_sentence([here, other_kind])


def test_results_written_before_provenance_say_machine_not_recorded() -> None:
    assert provenance.machine_of(None) == provenance.machine_of({}) == "machine not recorded"
    assert "machine not recorded" in provenance.machines_sentence([None, None])
    mixed = provenance.machines_sentence([provenance.collect(), None])
    assert "2 machines" in mixed and "machine not recorded" in mixed
