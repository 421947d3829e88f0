"""bench_gpu's argument handling and CPU-side helpers, without a GPU.

Not in the suite's `testpaths` (benchmarks are not tests); run it on its own:
    .venv/bin/python -m pytest benchmarks/test_bench_gpu.py
"""

from __future__ import annotations

import math

import bench_gpu
import pytest
import torch


def test_quick_preset_fills_what_was_not_given() -> None:
    args = bench_gpu.parse_args(["--quick", "--rounds", "4"])
    assert args.sizes == [1, 2, 4, 8]
    assert args.rounds == 4  # given: kept
    assert (args.clients, args.per_round, args.epochs, args.model) == (32, 16, 1, "cnn")


def test_full_preset_by_default() -> None:
    args = bench_gpu.parse_args([])
    assert args.sizes == [1, 2, 4, 8]
    assert args.rounds == bench_gpu.PRESETS["full"]["rounds"]


@pytest.mark.parametrize(
    "argv",
    [["--sizes", "1,x"], ["--sizes", "0,2"], ["--rounds", "1"], ["--clients", "4", "--per-round", "8"]],
)
def test_bad_arguments_are_refused_with_exit_2(argv: list[str]) -> None:
    with pytest.raises(SystemExit) as stop:
        bench_gpu.parse_args(argv)
    assert stop.value.code == 2


def test_refuses_without_cuda(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert bench_gpu.main(["--quick"]) == bench_gpu.NO_CUDA_EXIT == 2
    assert "no CUDA device is visible" in capsys.readouterr().err


def test_resources_split_the_gpu_or_the_cores() -> None:
    assert bench_gpu.resources(4, cuda=True, cpus=16, client_cpus=1.0) == (1.0, 0.25)
    assert bench_gpu.resources(2, cuda=False, cpus=2, client_cpus=1.0) == (1.0, 0.0)
    assert bench_gpu.too_many_cpus([1, 8], 1.0, cpus=16) is None
    assert "lower --client-cpus" in (bench_gpu.too_many_cpus([8], 4.0, cpus=16) or "")


def test_rates_count_updates_over_steady_rounds() -> None:
    whole, train = bench_gpu.rates(16, [(2.0, 1.0), (2.0, 1.0)])
    assert (whole, train) == (8.0, 16.0)
    assert all(math.isnan(r) for r in bench_gpu.rates(16, []))


def test_nvidia_smi_output_is_parsed() -> None:
    assert bench_gpu.parse_used("0, 1234\n1, 99\n", gpu=1) == 99
    assert bench_gpu.parse_used("[N/A]\n", gpu=0) is None
    assert bench_gpu.parse_apps("4242, 512\n4243, 800\nbad line\n") == {4242: 512, 4243: 800}
