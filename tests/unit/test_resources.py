"""The GPU share a client gets when `client_gpus` is left unset: the rule, its wiring, its warning.

The rule is a plain function (fedpfn/runtime/resources.py) and is tested as one. The wiring is tested
on this CPU-only machine by letting torch report one GPU: what changes then is the number
fedpfn computes before Ray starts, which is all that is checked here.
"""

from __future__ import annotations

import dataclasses
import itertools
import os
from typing import Any

import pytest
import torch

import run_sim
from fedpfn.core.cache import _data_on, dataset_on
from fedpfn.core.config import RunConfig
from fedpfn.runtime.resources import client_wants_gpu, concurrent_clients, gpu_share
from fedpfn.runtime.runfolder import RunFolder
from fedpfn.runtime.engines.ray import backend_config, resolve_client_gpus, warn_unused_gpu
from fedpfn.runtime.simulation import resume_config
from tests.support.config import tiny_config


def placed(cfg: RunConfig, **placement: Any) -> RunConfig:
    """`cfg` with its clients placed otherwise (`client_gpus=0.5`)."""
    return dataclasses.replace(cfg, placement=dataclasses.replace(cfg.placement, **placement))


@pytest.mark.parametrize(
    "cpus,client_cpus,per_round,gpus,share",
    [
        (16, 1.0, 10, 1, 0.1),  # ten clients train at once, a tenth of the GPU each
        (2, 1.0, 10, 1, 0.5),  # the CPUs allow two at once
        (16, 1.0, 4, 1, 0.25),  # the round has only four
        (16, 1.0, 3, 1, 0.3333),  # rounded down: three shares still fit on one GPU
        (8, 0.5, 20, 1, 0.0625),  # half a CPU each: sixteen at once
        (16, 1.0, 10, 2, 0.2),  # two GPUs shared by ten clients
        (16, 1.0, 4, 8, 1.0),  # more GPUs than clients: one each, never more
        (16, 1.0, 10, 0, 0.0),  # no GPU: the CPU
        (2, 4.0, 10, 1, 1.0),  # a client wants more CPUs than there are: one at a time
    ],
)
def test_gpu_share_rule(cpus, client_cpus, per_round, gpus, share):
    assert gpu_share(cpus, client_cpus, per_round, gpus) == share


def test_every_client_that_can_run_at_once_fits_on_the_gpus():
    for cpus, client_cpus, per_round, gpus in itertools.product(
        (1, 2, 3, 16, 96), (0.25, 1.0, 3.0), (1, 3, 7, 10, 1000), (1, 2, 3, 8)
    ):
        share = gpu_share(cpus, client_cpus, per_round, gpus)
        at_once = concurrent_clients(cpus, client_cpus, per_round)
        assert 0 < share <= 1 and at_once * share <= gpus + 1e-12, (cpus, client_cpus, per_round, gpus)


def test_client_device_choice():
    assert client_wants_gpu(None) and client_wants_gpu(0.25) and not client_wants_gpu(0.0)


def test_unset_resolves_to_the_cpu_without_a_gpu_and_a_set_value_is_kept():
    cfg = tiny_config()
    assert cfg.placement.client_gpus is None  # "auto" until resolved
    expected = gpu_share(os.cpu_count() or 1, 1.0, 2, torch.cuda.device_count())  # 0.0 without a GPU
    assert resolve_client_gpus(cfg).placement.client_gpus == expected
    assert resolve_client_gpus(placed(cfg, client_gpus=0.3)).placement.client_gpus == 0.3


def test_with_a_visible_gpu_clients_get_the_share_and_client_gpus_0_warns(monkeypatch, capsys):
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    cfg = tiny_config(clients_per_round=2)
    resolved = resolve_client_gpus(cfg)
    assert resolved.placement.client_gpus == gpu_share(os.cpu_count() or 1, 1.0, 2, 1)
    assert backend_config(cfg)["client_resources"]["num_gpus"] == resolved.placement.client_gpus
    warn_unused_gpu(resolved)
    assert capsys.readouterr().err == ""
    warn_unused_gpu(placed(cfg, client_gpus=0.0))
    assert capsys.readouterr().err == (
        "warning: 1 GPU(s) visible, but the clients train on the CPU (--client-gpus 0); "
        "only the server's evaluation uses the GPU\n"
    )
    on_cluster = resolve_client_gpus(placed(cfg, ray_address="auto"))
    assert on_cluster.placement.client_gpus == 0.0  # a cluster's GPUs are unknown before Ray starts


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without a GPU")
def test_asking_for_a_gpu_without_one_is_refused_before_anything(tmp_path, capsys):
    assert run_sim.main(["--client-gpus", "0.5", "--out", str(tmp_path / "r")]) == 2
    assert capsys.readouterr().err.splitlines() == [
        "error: client_gpus: 0.5 asks for a GPU but none is visible; use --client-gpus 0"
    ]
    assert not (tmp_path / "r").exists()


def test_the_dataset_is_placed_on_a_device_once_per_process():
    """Clients of one Ray worker share one copy on the device ('meta' stands in for a GPU here)."""
    cfg = tiny_config()
    before = _data_on.cache_info().misses
    first = dataset_on(cfg, torch.device("meta"))
    assert dataset_on(cfg, torch.device("meta")) is first
    assert first.train_x.device.type == "meta"
    assert _data_on.cache_info().misses == before + 1


def test_a_resumed_run_keeps_its_share_unless_moved(tmp_path):
    """config.json holds the resolved share; `--resume` may move the run (another machine, the CPU)."""
    folder = RunFolder(tmp_path / "run")
    folder.path.mkdir()
    cfg = placed(tiny_config(out=str(folder.path), engine="ray"), client_gpus=0.5)
    folder.start(cfg.to_dict(), overwrite=False)
    assert resume_config(str(folder.path), {}).placement.client_gpus == 0.5
    moved = resume_config(str(folder.path), {"client_gpus": "0", "client_cpus": "2"})
    assert (moved.placement.client_gpus, moved.placement.client_cpus) == (0.0, 2.0)
    assert folder.read_config()["client_gpus"] == 0.5  # written only when the resumed run starts
