"""The command line refuses bad input with one clear line each and exit code 2, before Ray starts.

The catalogue of refusals (README, "Refused inputs") runs in-process through `run_sim.main`,
so no test here starts Ray; a few run as real subprocesses to check the whole path (exit
code, no traceback). Every refusal leaves `--out` untouched: absent if it was absent, byte
for byte the same if it held a run.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

import run_sim
from fedpfn.core.anchors import AnchorParams
from tests.support.commands import refused, snapshot, toml

ROOT = Path(__file__).resolve().parents[2]
TESTS = Path(__file__).resolve().parents[1] / "support"  # user_strategy.py, broken_strategy.py


def run_cli(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(ROOT / "run_sim.py"), *args], cwd=cwd, capture_output=True, text=True, timeout=180
    )


BAD = [
    (["--algorithm", "fedfoo"], "algorithm: unknown 'fedfoo'"),
    (["--algorithm", "fedpfn+fedpnu"], "algorithm: unknown 'fedpfn+fedpnu'"),
    (["--dataset", "imagenet"], "dataset: unknown 'imagenet'"),
    (["--model", "gpt"], "model: unknown model 'gpt'; use one of mlp, cnn"),
    (["--partition", "pathological"], "partition: unknown 'pathological'"),
    (["--alpha", "0"], "alpha: 0.0 must be > 0"),
    (["--num-clients", "0"], "num_clients: 0 must be at least 1"),
    (["--num-clients", "5", "--clients-per-round", "6"], "clients_per_round: 6 must be at most num_clients (5)"),
    (["--rounds", "0"], "rounds: 0 must be at least 1"),
    (["--rounds", "many"], "rounds: 'many' is not an integer"),
    (["--lr", "-0.1"], "lr: -0.1 must be > 0"),
    (["--lr", "nan"], "lr: 'nan' is not a finite number"),
    (["--lr", "inf"], "lr: 'inf' is not a finite number"),
    (["--weight-decay", "inf"], "weight_decay: 'inf' is not a finite number"),
    (["--algorithm", "fedprox", "--prox-mu", "nan"], "prox_mu: 'nan' is not a finite number"),
    (["--server", "fedavgm", "--server-lr", "inf"], "server_lr: 'inf' is not a finite number"),
    (["--client-cpus", "nan"], "client_cpus: 'nan' is not a finite number"),
    (["--engine", "ray", "--client-cpus", "4096"], "client_cpus: 4096 exceeds this machine's"),
    (["--seed", "-1"], "seed: -1 must be in [0, 4294967295]"),
    (["--seed", "4294967296"], "seed: 4294967296 must be in [0, 4294967295]"),
    (["--anchor-ratio", "1", "--algorithm", "fedpfn"], "anchor_ratio: 1.0 must be in [0, 1)"),
    (["--anchor-granularity", "layer", "--algorithm", "fedpfn"], "anchor_granularity: unknown 'layer'"),
    (["--prox-mu", "0.5"], "prox_mu: 0.5 is set, but fedavg with server fedavg does not use it"),
    (["--algorithm", "scaffold", "--optimizer", "adam"], "optimizer: scaffold is defined for sgd only"),
    (["--server", "fedsgd"], "server: unknown 'fedsgd'"),
    (["--server", "no_such_module:Strategy"], "server: cannot import module 'no_such_module'"),
    (["--server", "user_strategy:np"], "server: 'user_strategy:np' is not a flwr.serverapp.strategy.Strategy"),
    (["--server", "broken_strategy:Anything"],
     "server: cannot import module 'broken_strategy' (RuntimeError: this module fails on import)"),
    (["--server", "user_strategy:NeedsBeta"], "server: user_strategy:NeedsBeta"),
    (["--server", "user_strategy:NeedsBeta", "--server-args", '{"gamma": 1}'],
     "server_args: user_strategy:NeedsBeta takes no argument gamma; it accepts"),
    (["--server", "user_strategy:NeedsBeta", "--server-args", "[1]"], "server_args: '[1]' is not a JSON object"),
    (["--data-root", "/no/such/dir"], "data_root: '/no/such/dir' is not a directory"),
    (["--simulate-failures", "1.5"], "simulate_failures: 1.5 must be in [0, 1)"),
    (["--ray-address", "127.0.0.1:1"], "ray_address: no Ray cluster answers at 127.0.0.1:1"),
    (["--ray-address", "nonsense"], "ray_address: 'nonsense' is not HOST:PORT or 'auto'"),
    (["--config", "/no/such.toml"], "config: file '/no/such.toml' does not exist"),
]


@pytest.mark.parametrize("args,message", BAD, ids=[" ".join(a) for a, _ in BAD])
def test_bad_setting_exit_2_one_line_no_folder(tmp_path, capsys, monkeypatch, args, message):
    monkeypatch.syspath_prepend(str(TESTS))  # user_strategy.py
    out = tmp_path / "run"
    lines = refused(capsys, monkeypatch, *args, "--out", str(out))
    assert any(line.startswith(f"error: {message}") for line in lines), lines
    assert not out.exists()


TOML_CASES = [
    ("run = 3\n", "'run' in '{path}' must be a table ([run]), not a value"),
    (b"\xff\xfe not text", "'{path}' is not UTF-8 text"),
    ("alpha = 0.3\n[run]\nrounds = 2\n", "has a [run] table and top-level keys (alpha)"),
    ("out = 5\n", "out: '5' is not text"),
    ("rounds = [[1]]\n", "rounds: '[[1]]' is not an integer"),
    ("x = " + "[" * 2000 + "]" * 2000 + "\n", "nested too deeply"),
    ("alhpa = 0.5\n", "unknown setting(s) alhpa"),
    ("alpha = -3.0\n", "alpha: -3.0 must be > 0"),
]


@pytest.mark.parametrize("text,message", TOML_CASES, ids=[m.split(" ")[0] for _, m in TOML_CASES])
def test_bad_preset_files(tmp_path, capsys, monkeypatch, text, message):
    path = toml(tmp_path, text)
    lines = refused(capsys, monkeypatch, "--config", path)
    assert any(message.format(path=path) in line for line in lines), lines


def test_a_directory_given_as_preset(tmp_path, capsys, monkeypatch):
    lines = refused(capsys, monkeypatch, "--config", str(tmp_path), "--out", str(tmp_path / "r"))
    assert lines == [f"error: config: '{tmp_path}' is a directory; give a TOML file"]


def test_every_problem_reported_at_once(tmp_path, capsys, monkeypatch):
    lines = refused(capsys, monkeypatch, "--alpha", "-1", "--rounds", "0", "--lr", "nan", "--out", str(tmp_path / "r"))
    assert len(lines) == 3


def test_config_file_values_and_flag_override(tmp_path):
    preset = toml(tmp_path, 'algorithm = "fedpfn"\nnum-clients = 7\n')
    cfg = run_sim.config_from_args({"config": preset, "num_clients": "9"})
    assert cfg.algorithm == "fedpfn" and cfg.federation.num_clients == 9


def test_out_that_is_a_file_is_refused(tmp_path, capsys, monkeypatch):
    (tmp_path / "taken").write_text("not a folder")
    lines = refused(capsys, monkeypatch, "--out", str(tmp_path / "taken"))
    assert lines == [f"error: out: '{tmp_path / 'taken'}' is a file; give a folder"]


def fake_finished_run(path: Path) -> dict[str, bytes]:
    """A finished run folder as the tool writes one (no Ray needed to make it)."""
    from tests.support.config import tiny_config
    from fedpfn.runtime.runfolder import RunFolder

    cfg = tiny_config(out=str(path))
    folder = RunFolder(path)
    with folder.exclusive():
        folder.start(cfg.to_dict(), overwrite=False)
    folder.append_metrics({"round": 1, "test_accuracy": 0.5})
    folder.write_summary({"rounds": 1})
    return snapshot(path)


def test_overwrite_of_a_finished_run_with_a_bad_setting_touches_nothing(tmp_path, capsys, monkeypatch):
    out = tmp_path / "done"
    before = fake_finished_run(out)
    refused(capsys, monkeypatch, "--overwrite", "--server", "nosuch.module:X", "--out", str(out))
    assert snapshot(out) == before
    (out / "notes.txt").write_text("mine")
    lines = refused(capsys, monkeypatch, "--overwrite", "--model", "mlp", "--out", str(out))
    assert any("holds files fedpfn did not write (notes.txt)" in line for line in lines)
    assert (out / "notes.txt").read_text() == "mine" and (out / "config.json").read_bytes() == before["config.json"]


def test_resume_refuses_conflicting_flags_and_finished_runs(tmp_path, capsys, monkeypatch):
    out = tmp_path / "done"
    before = fake_finished_run(out)
    lines = refused(capsys, monkeypatch, "--resume", str(out), "--lr", "0.5")
    assert any("lr: 0.5 != 0.05" in line and "only --rounds may extend it" in line for line in lines), lines
    lines = refused(capsys, monkeypatch, "--resume", str(out))
    assert any("is finished (2 rounds); pass --rounds N" in line for line in lines), lines
    lines = refused(capsys, monkeypatch, "--resume", str(out), "--rounds", "1")
    assert any("--rounds 1 is fewer than the run's 2" in line for line in lines), lines
    lines = refused(capsys, monkeypatch, "--resume", str(out), "--config", str(tmp_path / "x.toml"))
    assert any("--config cannot be combined with --resume" in line for line in lines)
    assert snapshot(out) == before


def test_resume_refuses_damaged_files(tmp_path, capsys, monkeypatch):
    out = tmp_path / "run"
    fake_finished_run(out)
    (out / "summary.json").unlink()
    (out / "checkpoint.npz").write_bytes(b"not a checkpoint")
    before = snapshot(out)
    lines = refused(capsys, monkeypatch, "--resume", str(out))
    assert any("checkpoint.npz is damaged" in line for line in lines), lines
    (out / "config.json").write_text("{ broken")
    lines = refused(capsys, monkeypatch, "--resume", str(out))
    assert any("config.json is damaged" in line for line in lines), lines
    assert {k: v for k, v in snapshot(out).items() if k != "config.json"} == {
        k: v for k, v in before.items() if k != "config.json"
    }


def test_resume_refuses_an_edited_config(tmp_path, capsys, monkeypatch):
    """config.json edited after the run: its checkpoint belongs to other settings."""
    from tests.support.config import tiny_config
    from fedpfn.runtime.runfolder import RunFolder

    out = tmp_path / "run"
    fake_finished_run(out)
    (out / "summary.json").unlink()
    RunFolder(out).save_checkpoint(tiny_config(out=str(out)).fingerprint(), {"round": 1})
    config = json.loads((out / "config.json").read_text())
    config["lr"] = 0.2
    (out / "config.json").write_text(json.dumps(config))
    lines = refused(capsys, monkeypatch, "--resume", str(out))
    assert any("belongs to other settings (lr: 0.05 -> 0.2)" in line for line in lines), lines


# --- the whole path, as a user runs it ---------------------------------------------------------


def test_subprocess_refusal_is_one_line_exit_2(tmp_path):
    result = run_cli("--alpha", "-1", "--server", "nosuch:X", "--out", str(tmp_path / "r"))
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        "error: alpha: -1.0 must be > 0",
        "error: server: cannot import module 'nosuch' (ModuleNotFoundError: No module named 'nosuch')",
    ]
    assert not (tmp_path / "r").exists()


def test_a_strategy_module_in_the_current_folder_is_found(tmp_path):
    (tmp_path / "mine.py").write_text("class NotAStrategy:\n    pass\n")
    result = run_cli("--server", "mine:NotAStrategy", "--out", str(tmp_path / "r"), cwd=tmp_path)
    assert result.returncode == 2 and "'mine:NotAStrategy' is not a flwr.serverapp.strategy.Strategy" in result.stderr


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

    from fedpfn.core.data import DEBIAN_FMNIST_DIR

    root = tmp_path / "fmnist"
    shutil.copytree(DEBIAN_FMNIST_DIR, root)
    broken = root / "train-images-idx3-ubyte.gz"
    broken.write_bytes(broken.read_bytes()[:100_000])
    result = run_cli("--data-root", str(root), "--out", str(tmp_path / "r"))
    assert result.returncode == 2
    assert "train-images-idx3-ubyte.gz" in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "r").exists()


# --- flags a run would not use, misspellings, KEY=VALUE (issue 23) --------------------------------

UNUSED = [
    (["--seeds", "0,1"], "seeds: --seeds is for --compare ALGOS"),
    (["--algorithm", "fedpfn", "--seeds", "0,1"], "seeds: --seeds is for --compare ALGOS"),  # ran FedAvg before
    (["--compare", "fedavg,fedpfn", "--algorithm", "fedpfn"], "algorithm: --compare names the algorithms it runs"),
    (["--compare", "fedavg,fedpfn", "--seed", "3"], "seed: --compare runs every seed of --seeds"),
    (["--compare", "fedavg", "--overwrite"], "overwrite: a comparison reuses or resumes the runs in --out"),
    (["--compare", "fedavg", "--resume", "x"], "resume: a comparison resumes its unfinished runs itself"),
    (["--resume", "x", "--out", "y"], "resume: --out cannot be combined with --resume"),
    (["--resume", "x", "--overwrite"], "resume: --overwrite cannot be combined with --resume"),
    (["--num_clients", "4"], "unknown flag --num_clients; did you mean --num-clients?"),
    (["--algo", "fedpfn"], "unknown flag --algo; did you mean --algorithm?"),
    (["--alhpa", "0.1"], "unknown flag --alhpa; did you mean --alpha?"),
    (["--rounds"], "--rounds needs a value"),
    (["--tensorboard=yes"], "--tensorboard takes no value: write --tensorboard or --no-tensorboard"),
    (["num_client=4"], "unknown setting 'num_client' in num_client=4; did you mean num-clients?"),
    (["rounds=0"], "rounds: 0 must be at least 1"),
    (["--rounds", "3", "rounds=4"], "rounds is given twice"),
    (["+rounds=4"], "'+rounds=4' is neither a flag nor KEY=VALUE"),
]


@pytest.mark.parametrize("args,message", UNUSED, ids=[" ".join(a) for a, _ in UNUSED])
def test_unused_or_misspelt_flags_are_refused_in_one_line_each(tmp_path, capsys, monkeypatch, args, message):
    lines = refused(capsys, monkeypatch, *args)
    assert any(line.startswith(f"error: {message}") for line in lines), lines
    assert len(lines) <= 2 and not any("usage:" in line for line in lines), lines  # no argparse usage dump


def test_key_value_overrides_are_settings_as_flwr_run_spells_them():
    args = run_sim.parse_args(["rounds=5", "num-clients=4", "algorithm='fedpfn'", "anchor_ratio=0.2", "--alpha", "0.1"])
    cfg = run_sim.config_from_args(args)
    assert (cfg.federation.rounds, cfg.federation.num_clients, cfg.algorithm, cfg.partition.alpha) == (5, 4, "fedpfn", 0.1)
    assert cfg.hyper("fedpfn", AnchorParams).anchor_ratio == 0.2


def test_subprocess_misspelt_flag_is_one_line_exit_2():
    result = run_cli("--num_clients", "4")
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        "error: unknown flag --num_clients; did you mean --num-clients? (python run_sim.py --help-all lists every flag)"
    ]


def test_help_is_grouped_with_what_runs_first():
    text = run_sim.build_parser().format_help()
    titles = [line[:-1] for line in text.splitlines() if line and not line[0].isspace() and line.endswith(":")]
    assert titles[1:] == ["run", "data", "client rule", "anchors", "server", "privacy", "attacks", "resources",
                          "tracking"], titles
    sections = dict(zip(titles, re.split(r"^\S.*:$", text, flags=re.M)[1:]))
    for title, flags in {"run": ("--algorithm", "--compare", "--out"), "data": ("--alpha", "--dataset"),
                         "client rule": ("--lr", "--prox-mu"), "anchors": ("--anchor-ratio",),
                         "server": ("--server ", "--server-lr", "--min-replies"),
                         "privacy": ("--server-wrap ", "--client-mod ", "--dp-delta"),
                         "attacks": ("--attack ", "--attack-fraction", "--attack-scale"),
                         "resources": ("--client-gpus",), "tracking": ("--wandb",)}.items():  # fmt: skip
        assert all(flag in sections[title] for flag in flags), (title, sections[title])
