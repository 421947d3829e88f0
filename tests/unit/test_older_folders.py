"""A run folder written by an earlier fedpfn reads as the same run today: config.json files written
by the fedpfn of before the namespaces (hyperparameters by name alone, `prox_mu`) and of before the
groups (older_configs.json: each made by that commit's own `load_config(given).to_json()`) parse
to the settings today's fedpfn gives the same flags, keep their default folder name, are reused
rather than refused by `fedpfn compare` and `fedpfn study`, and today's folder reads unchanged."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from fedpfn.core.hyper import flat_view
from fedpfn.runtime.algorithms import load_config
from fedpfn.runtime.ensure import differences
from fedpfn.runtime.runfolder import RunFolder

OLDER = json.loads((Path(__file__).parent / "older_configs.json").read_text())["runs"]


def folder_of(tmp_path: Path, config: dict) -> RunFolder:
    (tmp_path / "config.json").write_text(json.dumps(config, sort_keys=True))
    return RunFolder(tmp_path)


@pytest.mark.parametrize("name", sorted(OLDER))
def test_an_older_config_reads_as_todays_run_of_the_same_flags(tmp_path, name):
    older = OLDER[name]
    read = load_config(folder_of(tmp_path, older["config"]).read_config())
    today = load_config(older["given"])
    assert read.to_dict() == today.to_dict()
    assert read.fingerprint() == today.fingerprint()  # what its checkpoint is held to
    assert differences(older["config"], today.to_dict()) == []  # reused, not refused (fedpfn.runtime.ensure)
    default = {**older["given"], "out": None}  # the folder name a run without --out gets: kept
    unnamed = dataclasses.replace(read, output=dataclasses.replace(read.output, out=None))
    assert unnamed.run_dir == load_config(default).run_dir


def test_an_older_config_held_its_hyperparameters_by_name_and_reads_them_under_their_part():
    """The files are what those versions wrote: names alone before the namespaces, which today's
    fedpfn reads under each part that declares them (and by name, the view comparisons show)."""
    before = OLDER["fedpfn+fedprox"]["config"]
    assert before["prox_mu"] == 0.05 and "fedprox.prox_mu" not in before
    read = load_config(before).to_dict()
    assert read["fedprox.prox_mu"] == 0.05 and read["fedpfn.anchor_ratio"] == before["anchor_ratio"]
    assert flat_view(read)["prox_mu"] == 0.05
    shards = load_config(OLDER["fedprox-shards-loop"]["config"])
    partition = shards.partition
    assert (partition.method, partition.shards_per_client, shards.engine.mode) == ("shards", 3, "loop")


def test_todays_folder_reads_unchanged(tmp_path):
    today = load_config(OLDER["fedpnu-fedavgm"]["given"])
    written = json.loads(today.to_json())
    folder = folder_of(tmp_path, written)
    assert folder.read_config() == written
    assert load_config(folder.read_config()).to_dict() == today.to_dict()
