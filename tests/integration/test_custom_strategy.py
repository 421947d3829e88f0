"""The documented custom strategy, run as written, and Flower's robust aggregators by dotted path.

The example module and command are read out of docs/guide/algorithms.md (the README's section
before issue 34 moved it to the site), so the documentation cannot drift
from what runs. The robust aggregators go through the composed strategy in-process
(tests.support.rounds.run_round), where they must still find one full-size ArrayRecord per reply.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from flwr.app import ArrayRecord

import run_sim
from fedpfn.runtime.algorithms import build_strategy, validated
from fedpfn.core.cache import initial_model
from fedpfn.core.protocol import to_numpy
from tests.support.config import tiny_config
from tests.support.rounds import run_round

ROOT = Path(__file__).resolve().parents[2]
PAGE = (ROOT / "docs" / "guide" / "algorithms.md").read_text()
SECTION = PAGE[PAGE.index("## Custom server strategies") :]
MODULE = re.search(r"```python\n(.*?)```", SECTION, re.S).group(1)
COMMAND = next(line for line in SECTION.splitlines() if "--server my_strategy:MyFedAvg" in line)
ROBUST = [line for line in SECTION.splitlines() if line.startswith("fedpfn run --server flwr.")]


def user_folder(tmp_path: Path) -> Path:
    """A user's current folder: the README's my_strategy.py beside the project's command and presets."""
    (tmp_path / "my_strategy.py").write_text(MODULE)
    (tmp_path / "run_sim.py").symlink_to(ROOT / "run_sim.py")
    (tmp_path / "configs").symlink_to(ROOT / "configs")
    return tmp_path


def run_as_written(command: str, cwd: Path) -> subprocess.CompletedProcess:
    argv = shlex.split(command)
    assert argv[:2] == ["fedpfn", "run"]  # the same command as `python run_sim.py`
    argv = ["python", "run_sim.py", *argv[2:]]
    env = {**os.environ, "FLWR_TELEMETRY_ENABLED": "0", "FLWR_DISABLE_UPDATE_CHECK": "1"}
    argv = [sys.executable, *argv[1:]]
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


@pytest.mark.slow
def test_the_readme_example_runs_as_written(tmp_path):
    folder = user_folder(tmp_path)
    done = run_as_written(COMMAND, folder)
    assert done.returncode == 0, done.stderr[-3000:]
    argv = shlex.split(COMMAND)
    out = folder / argv[argv.index("--out") + 1]
    assert (out / "summary.json").exists()
    assert '"server": "my_strategy:MyFedAvg"' in (out / "config.json").read_text()


def test_a_wrong_keyword_is_refused_with_the_names_the_class_takes(tmp_path):
    folder = user_folder(tmp_path)
    done = run_as_written(COMMAND.replace('"beta"', '"betta"'), folder)
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        "error: server_args: my_strategy:MyFedAvg takes no argument betta; it accepts beta, fraction_train, "
        "fraction_evaluate, min_train_nodes, min_evaluate_nodes, min_available_nodes, weighted_by_key, "
        "arrayrecord_key, configrecord_key, train_metrics_aggr_fn, evaluate_metrics_aggr_fn"
    ]
    assert not (folder / "runs").exists()  # refused before the run folder, before Ray


def test_the_readme_strategy_steps_beta_of_the_way_to_the_mean(tmp_path, monkeypatch):
    """The class does what the README says, against FedAvg's mean of the same replies."""
    (tmp_path / "my_strategy.py").write_text(MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    step = tiny_config(server="my_strategy:MyFedAvg", server_args='{"beta": 0.2}')
    plain = tiny_config()
    sent = ArrayRecord(initial_model(plain).state_dict())
    stepped, _, _, _ = run_round(step, build_strategy(step, initial_model(step)), sent, 1)
    mean, _, _, _ = run_round(plain, build_strategy(plain, initial_model(plain)), sent, 1)
    start, stepped, mean = to_numpy(sent), to_numpy(stepped), to_numpy(mean)
    for name in start:
        np.testing.assert_allclose(stepped[name], start[name] + 0.2 * (mean[name] - start[name]), atol=1e-6)


@pytest.mark.parametrize("line", ROBUST)
def test_the_readme_robust_aggregators_are_accepted_and_keywords_checked(line, tmp_path, capsys):
    argv = shlex.split(line)[2:]
    cfg = validated(run_sim.config_from_args(run_sim.parse_args(argv)))
    strategy = build_strategy(cfg, initial_model(cfg))
    assert type(strategy.inner).__name__ == argv[1].split(":")[1]
    assert run_sim.main([*argv[:2], "--server-args", '{"gamma": 1}', "--out", str(tmp_path / "r")]) == 2
    assert "takes no argument gamma; it accepts fraction_train" in capsys.readouterr().err
    assert not (tmp_path / "r").exists()


class Recorder:
    """Keeps a copy of what the inner strategy receives (FedMedian empties the replies it reads)."""

    def __init__(self, inner) -> None:
        self.aggregate = inner.aggregate_train
        self.seen: list[list[dict[str, ArrayRecord]]] = []
        inner.aggregate_train = self

    def __call__(self, server_round, replies):
        replies = list(replies)
        self.seen.append([{k: to_numpy(r) for k, r in m.content.array_records.items()} for m in replies])
        return self.aggregate(server_round, replies)


@pytest.mark.parametrize("algorithm", ["fedavg", "fedpnu"])
def test_fedmedian_gets_one_full_array_record_per_reply_and_returns_the_median(algorithm):
    cfg = tiny_config(algorithm=algorithm, server="flwr.serverapp.strategy:FedMedian", clients_per_round=3)
    model = initial_model(cfg)
    strategy = build_strategy(cfg, model)
    recorder = Recorder(strategy.inner)
    arrays, _, _, _ = run_round(cfg, strategy, ArrayRecord(model.state_dict()), 1)
    [replies] = recorder.seen
    assert len(replies) == 3 and all(list(r) == ["arrays"] for r in replies)
    shapes = {name: tuple(p.shape) for name, p in model.named_parameters()}
    assert all({n: a.shape for n, a in r["arrays"].items()} == shapes for r in replies)
    median = {n: np.median(np.stack([r["arrays"][n] for r in replies]), axis=0) for n in shapes}
    result = to_numpy(arrays)
    for name in shapes:
        np.testing.assert_allclose(result[name], median[name], rtol=0, atol=1e-7)
        assert result[name].dtype == np.float32


def test_krum_picks_one_clients_parameters_through_the_composed_strategy():
    cfg = tiny_config(
        server="flwr.serverapp.strategy:Krum", server_args='{"num_malicious_nodes": 1}', clients_per_round=4
    )
    model = initial_model(cfg)
    strategy = build_strategy(cfg, model)
    recorder = Recorder(strategy.inner)
    arrays, _, _, _ = run_round(cfg, strategy, ArrayRecord(model.state_dict()), 1)
    result = to_numpy(arrays)
    picked = [r for r in recorder.seen[0] if all(np.array_equal(r["arrays"][n], result[n]) for n in result)]
    assert len(picked) == 1  # Krum returns one reply's parameters unchanged


def test_server_args_that_fedpfn_sets_itself_are_refused_not_overwritten(capsys, monkeypatch):
    monkeypatch.syspath_prepend(str(Path(__file__).parents[1] / "support"))  # user_strategy.py
    code = run_sim.main(["--server", "flwr.serverapp.strategy:FedMedian", "--server-args", '{"fraction_train": 0.5}'])
    err = capsys.readouterr().err
    assert code == 2 and "server_args: fraction_train is fedpfn's to set" in err and err.count("\n") == 1
