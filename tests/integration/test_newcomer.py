"""A newcomer's first hour (issue 23): every command block of the README runs as written in a
fresh copy of the checkout, no run lands in another's folder, warnings where a result would
mean nothing, an honest `flwr run` route, and a study page never replaced by an empty one.

Everything runs in-process or as a short subprocess; no engine starts and nothing trains: a
command that would train is stopped where its engine (or LMC's training) would begin, after
every check and after its folder is claimed. `flwr run` lines are read as Flower reads them
and checked like a run (tests/deploy/test_flower_route.py runs them through a SuperLink).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from tests.support.site_commands import (
    EngineReached,
    as_a_newcomer,
    check,
    fresh_checkout,
    page_commands,
    reach_engine,
    shell,
)

import run_sim
from fedpfn.core.user_code import name_code
from fedpfn.runtime import env
from fedpfn.runtime.algorithms import load_config
from fedpfn.runtime.compare import seeds_warning
from strategies.registry import build_user_strategy
from tests.support.commands import no_engine_starts
from tests.support.config import tiny_config

ROOT = Path(__file__).resolve().parents[2]
TINY = [
    "--model",
    "mlp",
    "--num-clients",
    "4",
    "--clients-per-round",
    "2",
    "--rounds",
    "1",
    "--partition",
    "iid",
]
KRUM = ["--server", "flwr.serverapp.strategy:Krum", "--server-args", '{"num_malicious_nodes": 2}']


@pytest.fixture
def stop_at_engine(monkeypatch, tmp_path) -> list:
    """Commands run in tmp_path (a relative default folder lands there); the claimed folders, in order."""
    monkeypatch.chdir(tmp_path)
    claimed: list[Path] = []

    def engine_start(run, tracker, app) -> None:
        claimed.append(run.folder.path.relative_to(tmp_path))
        raise EngineReached

    no_engine_starts(monkeypatch, engine_start)
    return claimed


# --- default run folders -------------------------------------------------------------------------


def test_runs_of_other_servers_or_alphas_never_share_a_default_folder(stop_at_engine):
    """The README's FedMedian and Krum examples wrote one folder before: the second was refused."""
    median = ["--server", "flwr.serverapp.strategy:FedMedian"]
    for extra in (
        [],
        ["--server", "fedavgm"],
        median,
        KRUM[:2],
        ["--partition", "dirichlet", "--alpha", "0.1"],
        ["--seed", "1"],
    ):
        reach_engine(*TINY, *extra)
    default, fedavgm, fedmedian, krum, alpha, seed1 = (str(path) for path in stop_at_engine)
    assert len(set(stop_at_engine)) == 6
    assert (
        fedavgm.startswith("runs/fedavg-fedavgm-fmnist-mlp-")
        and "-FedMedian-" in fedmedian
        and "-Krum-" in krum
    )
    assert seed1 == default.removesuffix("-s0") + "-s1"  # one setting's seeds side by side
    assert alpha.endswith("-s0") and alpha.split("-")[-2] != default.split("-")[-2]


def test_the_default_folder_ignores_where_a_run_computes_and_logs():
    base = tiny_config(out=None)
    moved = load_config({**base.to_dict(), "client_cpus": 2.0, "tensorboard": True, "checkpoint_every": 5})
    assert moved.run_dir == base.run_dir
    assert load_config({**base.to_dict(), "lr": 0.1}).run_dir != base.run_dir


# --- warnings where a result would mean nothing -------------------------------------------------------


def test_krum_with_too_few_clients_a_round_is_warned_about_on_screen_and_in_run_log(stop_at_engine, capsys):
    reach_engine(*TINY, *KRUM)
    err = capsys.readouterr().err
    warning = "num_malicious_nodes=2 needs at least 7 replies a round"
    assert warning in err and "with 2 clients a round its choice means nothing" in err
    assert warning in (stop_at_engine[0] / "run.log").read_text()


def test_krum_with_enough_clients_is_not_warned_about(caplog):
    name_code(KRUM[1])  # as `--server` on a command line names it; not left to another test in this worker
    build_user_strategy(KRUM[1], KRUM[3], per_round=7)
    assert "needs at least" not in caplog.text
    build_user_strategy(KRUM[1], KRUM[3], per_round=6)
    assert "needs at least 7 replies" in caplog.text


def test_compare_with_fewer_than_three_seeds_is_warned_about(stop_at_engine, capsys):
    assert seeds_warning([0, 1, 2]) is None
    with pytest.raises(EngineReached):
        run_sim.main(["--compare", "fedavg,fedpfn", "--seeds", "0,1", *TINY, "--out", "cmp"])
    err = capsys.readouterr().err
    assert "warning: 2 seeds: each 95 % interval has 1 degree of freedom" in err and "not given" in err


# --- the flwr run route --------------------------------------------------------------------------------


def test_activate_sets_flowers_switches_and_a_local_superlink_port_per_user(tmp_path):
    """What `make` puts in .venv/bin/activate; a value exported before activating wins."""
    activate = tmp_path / "activate"
    activate.write_text("# a venv's activate\nexport VIRTUAL_ENV=/x\n")
    env.write_activate(activate)
    env.write_activate(activate)  # again (make after a change): one block, the venv's lines kept
    text = activate.read_text()
    assert text.count(env.BLOCK[0]) == 1 and text.startswith("# a venv's activate\nexport VIRTUAL_ENV=/x\n")
    script = f". {activate}; env; FLWR_TELEMETRY_ENABLED=1 bash -c '. {activate}; echo mine=$FLWR_TELEMETRY_ENABLED'"
    shown = subprocess.run(
        ["bash", "-c", script], capture_output=True, text=True, check=True, env={"PATH": "/usr/bin:/bin"}
    )
    values = dict(line.split("=", 1) for line in shown.stdout.splitlines() if "=" in line)
    assert (
        values["FLWR_TELEMETRY_ENABLED"] == "0"
        and values["FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION"] == "1"
    )
    uid = int(subprocess.run(["id", "-u"], check=True, capture_output=True, text=True).stdout)
    http = env.LOCAL_PORT_BASE + 2 * (uid % env.LOCAL_PORT_USERS)
    assert values["FLWR_LOCAL_SUPERLINK_HTTP_API_PORT"] == str(http) != "39091"
    assert values["FLWR_LOCAL_CONTROL_API_PORT"] == str(http + 1)
    assert values["mine"] == "1"


def test_an_app_in_flowers_per_run_environment_is_refused_unless_asked_for(monkeypatch, tmp_path):
    monkeypatch.setenv("FLWR_HOME", str(tmp_path / "flwr-home"))
    monkeypatch.setenv("VIRTUAL_ENV", str(tmp_path / "flwr-home" / "runtime-envs" / "7"))
    monkeypatch.setenv(env.INSTALL_SWITCH, "1")
    problem = env.runtime_env_problem()
    assert problem is not None and "runtime-envs/7" in problem and ". .venv/bin/activate" in problem
    monkeypatch.setenv(env.INSTALL_SWITCH, "0")  # the user's choice
    assert env.runtime_env_problem() is None
    monkeypatch.setenv(env.INSTALL_SWITCH, "1")
    monkeypatch.setenv("VIRTUAL_ENV", sys.prefix)  # the project's own venv, activated
    assert env.runtime_env_problem() is None


# --- the README's commands, as written, in a fresh copy of the checkout --------------------------------


@pytest.fixture(scope="module")
def checkout(tmp_path_factory) -> Path:
    return fresh_checkout(tmp_path_factory)


def test_every_readme_command_runs_as_written(checkout, monkeypatch):
    """In the README's order, as a newcomer types them (`--resume runs/pfn` needs the run before it)."""
    as_a_newcomer(checkout, monkeypatch)  # `~/data` lands in the copy
    commands = page_commands(ROOT / "README.md")
    assert len(commands) >= 14, commands  # the README shows 14: fewer means some were not read
    for command in commands:
        try:
            check(checkout, command, monkeypatch)
        except (Exception, pytest.fail.Exception) as err:
            raise AssertionError(f"the README command `{command}` did not run as written: {err}") from err
