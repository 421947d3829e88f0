"""Three refusals compare a stored run's settings with requested ones: a folder `fedpfn compare` or
`fedpfn study` would reuse (fedpfn.runtime.ensure), a resume (RunConfig.differences) and a
checkpoint (RunFolder.check_belongs). One comparison, fedpfn.core.hyper.changed_settings, finds
the same names for each, and each says them in its own words."""

from __future__ import annotations

import pytest

from fedpfn.core.hyper import changed_settings
from fedpfn.runtime.ensure import differences
from fedpfn.runtime.runfolder import RunFolder, RunFolderError
from tests.support.config import tiny_config


def test_a_setting_compares_by_name_as_json_stores_it_and_an_absent_one_as_told():
    """A folder written before the namespaces (`prox_mu`) is the same run as `fedprox.prox_mu`; a
    tuple is the list config.json holds; a name one side lacks is `absent`, unless ignored."""
    stored = {"prox_mu": 0.01, "sizes": [1, 2], "lr": 0.05, "out": "a"}
    requested = {"fedprox.prox_mu": 0.01, "sizes": (1, 2), "lr": 0.1, "out": "b", "new": None}
    assert changed_settings(stored, requested, ignore=("out",)) == [("lr", 0.05, 0.1)]
    assert changed_settings(stored, requested, ignore=("out",), absent="(absent)") == [
        ("lr", 0.05, 0.1),
        ("new", "(absent)", None),
    ]
    assert changed_settings(stored, {**requested, "fedprox.prox_mu": 0.5}, ignore=("out", "lr")) == [
        ("prox_mu", 0.01, 0.5)
    ]


def test_the_three_refusals_name_the_same_settings_each_in_its_own_words(tmp_path):
    stored = tiny_config(algorithm="fedprox", lr=0.05, rounds=2)
    requested = tiny_config(algorithm="fedprox", lr=0.1, rounds=3, prox_mu=0.5)
    assert stored.differences(requested) == ["lr: 0.05 != 0.1", "prox_mu: 0.01 != 0.5", "rounds: 2 != 3"]
    reused = differences(stored.to_dict(), requested.to_dict())
    assert reused == ["lr 0.05 != 0.1", "prox_mu 0.01 != 0.5", "rounds 2 != 3"]
    folder = RunFolder(tmp_path / "run")
    with folder.exclusive():
        folder.start(stored.to_dict(), overwrite=False)
    folder.save_checkpoint(stored.fingerprint(), {"round": 1})
    assert folder.check_belongs(stored.fingerprint())
    refused = r"belongs to other settings \(lr: 0.05 -> 0.1, prox_mu: 0.01 -> 0.5\)"  # rounds: not in it
    with pytest.raises(RunFolderError, match=refused):
        folder.check_belongs(requested.fingerprint())
