"""The command line refuses bad settings with one clear line each and exit code 2."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def run_cli(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(ROOT / "run_sim.py"), *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
    )


BAD = [
    (["--algorithm", "fedfoo"], "algorithm: unknown 'fedfoo'"),
    (["--algorithm", "fedpfn+fedpnu"], "algorithm: unknown 'fedpfn+fedpnu'"),
    (["--dataset", "imagenet"], "dataset: unknown 'imagenet'"),
    (["--model", "gpt"], "model: unknown 'gpt'"),
    (["--partition", "pathological"], "partition: unknown 'pathological'"),
    (["--alpha", "0"], "alpha: 0.0 must be > 0"),
    (["--num-clients", "0"], "num_clients: 0 must be at least 1"),
    (["--num-clients", "5", "--clients-per-round", "6"], "clients_per_round: 6 must be between 1 and num_clients (5)"),
    (["--rounds", "0"], "rounds: 0 must be at least 1"),
    (["--lr", "-0.1"], "lr: -0.1 must be > 0"),
    (["--anchor-ratio", "1"], "anchor_ratio: 1.0 must be in [0, 1)"),
    (["--anchor-ratio", "-0.2"], "anchor_ratio: -0.2 must be in [0, 1)"),
    (["--anchor-granularity", "layer"], "anchor_granularity: unknown 'layer'"),
    (["--server", "fedsgd"], "server: unknown 'fedsgd'"),
    (["--data-root", "/no/such/dir"], "data_root: '/no/such/dir' is not a directory"),
    (["--rounds", "many"], "rounds: 'many' is not a valid int"),
    (["--simulate-failures", "1.5"], "simulate_failures: 1.5 must be in [0, 1)"),
    (["--config", "/no/such.toml"], "config: file '/no/such.toml' does not exist"),
]


@pytest.mark.parametrize("args,message", BAD, ids=[" ".join(a) for a, _ in BAD])
def test_bad_setting_exit_2_one_line_no_folder(tmp_path, args, message):
    out = tmp_path / "run"
    result = run_cli(*args, "--out", str(out))
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert lines == [f"error: {message}"] or any(line.startswith(f"error: {message}") for line in lines)
    assert "Traceback" not in result.stderr
    assert not out.exists()


def test_every_problem_reported_at_once(tmp_path):
    result = run_cli("--alpha", "-1", "--rounds", "0", "--out", str(tmp_path / "r"))
    assert result.returncode == 2
    assert result.stderr.count("error: ") == 2


def test_unknown_server_class_refused_before_start(tmp_path):
    result = run_cli("--server", "no_such_module:Strategy", "--out", str(tmp_path / "r"))
    assert result.returncode == 2
    assert "error: server: cannot import module 'no_such_module'" in result.stderr


def test_config_file_values_and_flag_override(tmp_path):
    preset = tmp_path / "p.toml"
    preset.write_text('algorithm = "fedpfn"\nalpha = -3.0\n')
    result = run_cli("--config", str(preset), "--out", str(tmp_path / "r"))
    assert result.returncode == 2 and "alpha: -3.0 must be > 0" in result.stderr
    from run_sim import config_from_args

    cfg = config_from_args({"config": str(preset), "alpha": "0.7"})
    assert cfg.algorithm == "fedpfn" and cfg.alpha == 0.7


def test_unknown_setting_in_config_file(tmp_path):
    preset = tmp_path / "p.toml"
    preset.write_text("alhpa = 0.5\n")
    result = run_cli("--config", str(preset), "--out", str(tmp_path / "r"))
    assert result.returncode == 2 and "unknown setting(s) alhpa" in result.stderr


def test_impossible_partition_refused_before_ray(tmp_path):
    result = run_cli(
        "--num-clients", "100", "--clients-per-round", "10", "--alpha", "0.01",
        "--min-partition-size", "500", "--out", str(tmp_path / "r"),
    )
    assert result.returncode == 2
    assert result.stderr.startswith("error: ") and "Traceback" not in result.stderr
    assert not (tmp_path / "r").exists()


def test_truncated_data_file_named_in_the_error(tmp_path):
    import shutil

    from fedpfn.data import DEBIAN_FMNIST_DIR

    root = tmp_path / "fmnist"
    shutil.copytree(DEBIAN_FMNIST_DIR, root)
    broken = root / "train-images-idx3-ubyte.gz"
    broken.write_bytes(broken.read_bytes()[:100_000])
    result = run_cli("--data-root", str(root), "--out", str(tmp_path / "r"))
    assert result.returncode == 2
    assert "train-images-idx3-ubyte.gz" in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "r").exists()
