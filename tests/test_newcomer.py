"""A newcomer's first hour (issue 23): every command block of the README runs as written in a
fresh copy of the checkout, no run lands in another's folder, warnings where a result would
mean nothing, an honest `flwr run` route, and a study page never replaced by an empty one.

Everything runs in-process or as a short subprocess; no engine starts and nothing trains: a
command that would train is stopped where its engine (or LMC's training) would begin, after
every check and after its folder is claimed. `flwr run` lines are read as Flower reads them
and checked like a run (tests/test_flower_route.py runs them through a SuperLink).
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

import run_sim
from conftest import no_engine_starts, tiny_config
from fedpfn.analysis import lmc
from fedpfn.runtime import env
from fedpfn.runtime.algorithms import load_config, validated
from fedpfn.runtime.compare import seeds_warning
from strategies.registry import build_user_strategy

ROOT = Path(__file__).resolve().parents[1]
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


class EngineReached(Exception):
    """Raised where the engine would start: every check has passed and the folder is claimed."""


@pytest.fixture
def stop_at_engine(monkeypatch, tmp_path) -> list:
    """Commands run in tmp_path (a relative default folder lands there); the claimed folders, in order."""
    monkeypatch.chdir(tmp_path)
    claimed: list[Path] = []

    def engine_start(run, tracker) -> None:
        claimed.append(run.folder.path.relative_to(tmp_path))
        raise EngineReached

    no_engine_starts(monkeypatch, engine_start)
    return claimed


def reach_engine(*argv: str) -> None:
    with pytest.raises(EngineReached):
        run_sim.main(list(argv))


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
    build_user_strategy(KRUM[1], KRUM[3], per_round=7)
    assert not caplog.records
    build_user_strategy(KRUM[1], KRUM[3], per_round=6)
    assert "needs at least 7 replies" in caplog.text


def test_compare_with_fewer_than_three_seeds_is_warned_about(stop_at_engine, capsys):
    assert seeds_warning([0, 1, 2]) is None
    with pytest.raises(EngineReached):
        run_sim.main(["--compare", "fedavg,fedpfn", "--seeds", "0,1", *TINY, "--out", "cmp"])
    err = capsys.readouterr().err
    assert "warning: 2 seeds: each 95 % interval has 1 degree of freedom" in err and "zero width" in err


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
    uid = int(subprocess.run(["id", "-u"], capture_output=True, text=True).stdout)
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

SUBPROCESS_ENV = {**os.environ, **env.FLOWER_DEFAULTS}
NOT_COPIED = (".venv", "runs", ".git", "__pycache__", "*.egg-info", ".pytest_cache")


def bash_commands(page: Path) -> list[str]:
    """Every command of a page's ```bash blocks, in order; continued lines joined."""
    blocks = re.findall(r"```bash\n(.*?)```", page.read_text(), re.S)
    lines = [line for block in blocks for line in block.replace("\\\n", " ").splitlines()]
    return [line for line in lines if shlex.split(line, comments=True)]


def readme_commands() -> list[str]:
    return bash_commands(ROOT / "README.md")


def site_pages() -> list[Path]:
    """The site's hand-written guide pages in the navigation's order (the pages scripts write,
    the deployment and architecture pages aside)."""
    import yaml

    def leaves(nav) -> list[str]:
        if isinstance(nav, str):
            return [nav]
        items = nav.values() if isinstance(nav, dict) else nav
        return [leaf for item in items for leaf in leaves(item)]

    nav = yaml.safe_load((ROOT / "mkdocs.yml").read_text())["nav"]
    guides = ("index.md", "getting-started/", "guide/", "analysis/", "development/")
    return [ROOT / "docs" / page for page in leaves(nav) if page.startswith(guides)]


def fresh_checkout(tmp_path_factory) -> Path:
    """The checkout's files without runs or caches, the venv linked in: a fresh clone after `make`."""
    copy = tmp_path_factory.mktemp("clone") / "fedpfn"
    shutil.copytree(ROOT, copy, ignore=shutil.ignore_patterns(*NOT_COPIED), symlinks=True)
    (copy / ".venv").symlink_to(ROOT / ".venv")
    page = (ROOT / "docs" / "guide" / "algorithms.md").read_text()
    strategy = re.search(r"```python\n(.*?)```", page[page.index("## Custom server strategies") :], re.S)[1]
    (copy / "my_strategy.py").write_text(strategy)  # "saved as my_strategy.py"
    (copy / "home").mkdir()
    return copy


@pytest.fixture(scope="module")
def checkout(tmp_path_factory) -> Path:
    return fresh_checkout(tmp_path_factory)


def shell(copy: Path, command: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", command], cwd=copy, capture_output=True, text=True, timeout=120,
                          env={**SUBPROCESS_ENV, "HOME": str(copy / "home")})  # fmt: skip


def check_run_sim(copy: Path, args: list[str]) -> None:
    """--help prints and exits 0; a download needs the network, so its settings are checked
    alone; any other command reaches its engine (or LMC's training) with every check passed."""
    if args == ["--help"]:
        with pytest.raises(SystemExit) as done:
            run_sim.main(args)
        assert done.value.code == 0
    elif "--download" in args or "HEAD_IP:6379" in args:  # the network; a cluster of the user's machines
        validated(run_sim.config_from_args(run_sim.parse_args(args)))
    else:
        reach_engine(*args)


def check_lmc(copy: Path, args: list[str], monkeypatch) -> None:
    def training_starts(*_args, **_kwargs):
        raise EngineReached

    monkeypatch.setattr(lmc, "run_lmc", training_starts)
    with pytest.raises(EngineReached):
        lmc.main(args)


def check_flwr_run(copy: Path, args: list[str]) -> None:
    """The run config as Flower fuses it (pyproject's table, then --run-config) passes fedpfn's
    checks, and the federation has one SuperNode per client."""
    from flwr.common.config import fuse_dicts, parse_config_args

    options = dict(zip(args[1::2], args[2::2]))  # after the app's folder: --flag value pairs, --stream aside
    declared = tomllib.loads((copy / "pyproject.toml").read_text())["tool"]["flwr"]["app"]["config"]
    run_config = parse_config_args([options["--run-config"]]) if "--run-config" in options else {}
    cfg = load_config(dict(fuse_dicts(declared, run_config)))
    assert parse_config_args([options["--federation-config"]])["num-supernodes"] == cfg.num_clients


def check(copy: Path, command: str, monkeypatch) -> None:
    """One README command, each part of a `&&` chain in turn; an unknown kind of command fails."""
    for part in command.split("&&"):
        words = shlex.split(part, comments=True)
        match words:
            case ["make", target]:
                planned = shell(copy, f"make -n {target}")
                assert planned.returncode == 0 and ". .venv/bin/activate" in planned.stdout, planned.stderr
                runs = [
                    line
                    for line in planned.stdout.splitlines()
                    if line.startswith(".venv/bin/python run_sim.py")
                ]
                assert runs or target != "run", planned.stdout
                for line in runs:  # what it would run, checked as the README's own commands are
                    check_run_sim(copy, shlex.split(line)[2:])
            case [".", ".venv/bin/activate"]:
                activated = shell(
                    copy, ". .venv/bin/activate && command -v python && python -c 'import fedpfn'"
                )
                assert activated.returncode == 0 and activated.stdout.strip().endswith(".venv/bin/python")
            case ["mkdir", *_]:
                assert shell(copy, part).returncode == 0
            case ["python", "run_sim.py", *args] | ["fedpfn", "run", *args]:
                check_run_sim(copy, args)
            case ["fedpfn", *verb, "--help"]:  # `fedpfn --help`, `fedpfn VERB --help`: the installed command
                shown = shell(copy, shlex.join([".venv/bin/fedpfn", *verb, "--help"]))
                assert shown.returncode == 0 and "usage: fedpfn" in shown.stdout, shown.stderr
            case ["fedpfn", "compare", algorithms, *args]:
                check_run_sim(copy, ["--compare", algorithms, *args])
            case ["fedpfn", "resume", *args]:
                check_run_sim(copy, ["--resume", *args])
            case ["fedpfn", "align", *args]:
                check_lmc(copy, args, monkeypatch)
            case [
                "fedpfn",
                ("pretrain" | "soup" | "report") as verb,
                *args,
            ]:  # minutes to hours: their settings
                shown = shell(copy, f".venv/bin/fedpfn {verb} --help")
                flags = [word for word in args if word.startswith("--")]
                assert shown.returncode == 0 and all(flag in shown.stdout for flag in flags), shown.stdout
            case ["python3", "-m", "venv", *_]:
                assert shell(copy, "python3 -m venv --help").returncode == 0
            case ["pip", "install", "-e", spec]:  # the extras it names exist (the venv is the one make built)
                extras = tomllib.loads((copy / "pyproject.toml").read_text())["project"][
                    "optional-dependencies"
                ]
                assert spec.startswith(".[") and set(spec[2:-1].split(",")) <= set(extras), spec
            case ["python", "-m", "fedpfn.runtime.env", *_]:  # prints activate's lines (make writes them)
                shown = shell(copy, ".venv/bin/python -m fedpfn.runtime.env")
                assert shown.returncode == 0 and "FLWR_TELEMETRY_ENABLED" in shown.stdout, shown.stderr
            case ["tensorboard", "--logdir", _]:
                assert shell(copy, ".venv/bin/tensorboard --help").returncode == 0
            case ["python", "scripts/drift_page.py", "--model", model, "--stored"]:
                shown = shell(copy, ".venv/bin/python scripts/drift_page.py --help")
                assert shown.returncode == 0 and "--stored" in shown.stdout and model in shown.stdout, (
                    shown.stdout
                )
            case [
                "ray",
                ("start" | "stop") as verb,
                *_,
            ]:  # a cluster of the user's machines: Ray's CLI, from the venv
                shown = shell(copy, f". .venv/bin/activate && command -v ray && ray {verb} --help")
                assert shown.returncode == 0 and shown.stdout.splitlines()[0].endswith(".venv/bin/ray"), (
                    shown.stderr
                )
            case ["python", "-m", "fedpfn.analysis.lmc", *args]:
                check_lmc(copy, args, monkeypatch)
            case ["python", "scripts/study_report.py"]:
                done = shell(copy, ".venv/bin/python scripts/study_report.py")
                assert done.returncode == 1 and "left unchanged" in done.stderr, done.stderr
                assert (copy / "docs/results_earlier.md").read_bytes() == (
                    ROOT / "docs/results_earlier.md"
                ).read_bytes()
            case ["python", "scripts/study.py", "--help"]:
                done = shell(copy, ".venv/bin/python scripts/study.py --help")
                assert done.returncode == 0 and "all" in done.stdout
            case ["python", "scripts/drift_study.py", stage, "--model", model]:
                done = shell(copy, ".venv/bin/python scripts/drift_study.py --help")  # the runs take hours
                assert done.returncode == 0 and stage in done.stdout and model in done.stdout, done.stdout
            case ["python", "scripts/drift_page.py", "--model", model]:
                done = shell(copy, f".venv/bin/python scripts/drift_page.py --model {model}")
                assert done.returncode == 1 and "main runs are not finished" in done.stderr, done.stderr
                assert (copy / "docs/results.md").read_bytes() == (ROOT / "docs/results.md").read_bytes()
            case ["nice", "-n", _, "python", "scripts/alignment_sweep.py", "--seeds", seeds]:
                done = shell(
                    copy, ".venv/bin/python scripts/alignment_sweep.py --help"
                )  # the cells take hours
                assert done.returncode == 0 and "--seeds" in done.stdout and "-" in seeds, done.stdout
            case ["python", "scripts/alignment_page.py"]:
                done = shell(copy, ".venv/bin/python scripts/alignment_page.py")  # no cells in a fresh copy
                assert done.returncode == 2 and "no finished cell" in done.stderr, done.stderr
                assert (copy / "docs/alignment.md").read_bytes() == (ROOT / "docs/alignment.md").read_bytes()
            case ["flwr", "run", ".", *args]:
                check_flwr_run(copy, [".", *args])
            case ["flwr", "ls"]:
                assert shell(copy, ".venv/bin/flwr ls --help").returncode == 0
            case _:
                pytest.fail(f"tests/test_newcomer.py has no check for the README command: {part.strip()}")


def test_every_readme_command_runs_as_written(checkout, monkeypatch):
    """In the README's order, as a newcomer types them (`--resume runs/pfn` needs the run before it)."""
    monkeypatch.chdir(checkout)
    monkeypatch.setenv("HOME", str(checkout / "home"))  # `~/data` lands in the copy

    def engine_start(run, tracker) -> None:
        raise EngineReached

    no_engine_starts(monkeypatch, engine_start)
    commands = readme_commands()
    assert len(commands) >= 15, commands
    for command in commands:
        try:
            check(checkout, command, monkeypatch)
        except (Exception, pytest.fail.Exception) as err:
            raise AssertionError(f"the README command `{command}` did not run as written: {err}") from err


@pytest.mark.slow  # about 40 s on the loaded 2 cores: the study scripts' pages and helps are subprocesses
def test_every_site_command_runs_as_written(tmp_path_factory, monkeypatch):
    """The site's guide pages, in the navigation's order, in a clone of their own (the README's
    runs would hold their folders): as a newcomer reading the site types them."""
    copy = fresh_checkout(tmp_path_factory)
    monkeypatch.chdir(copy)
    monkeypatch.setenv("HOME", str(copy / "home"))

    def engine_start(run, tracker) -> None:
        raise EngineReached

    no_engine_starts(monkeypatch, engine_start)
    commands = [(page, command) for page in site_pages() for command in bash_commands(page)]
    assert len(commands) >= 40, commands
    for page, command in commands:
        try:
            check(copy, command, monkeypatch)
        except (Exception, pytest.fail.Exception) as err:
            raise AssertionError(
                f"{page.relative_to(ROOT)}: `{command}` did not run as written: {err}"
            ) from err


def test_study_report_writes_a_page_that_loses_nothing(checkout):
    """Where the page reports no finished section, the pending page replaces it (the script still writes)."""
    page = checkout / "docs" / "results_earlier.md"
    page.write_text("# an earlier page with no results\n")
    done = shell(checkout, ".venv/bin/python scripts/study_report.py")
    assert done.returncode == 0 and "comparisons pending" in done.stdout
    assert "## Not yet run" in page.read_text()
    shutil.copy2(ROOT / "docs" / "results_earlier.md", page)
