"""The installed `fedpfn` command: its verbs, their help, and refusals as one line with exit 2."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from fedpfn.cli.main import VERBS, main

IN_PROCESS = ("run", "report", "align", "partition", "pretrain", "soup", "cold")  # verbs whose help needs no subprocess


def test_help_lists_every_verb(capsys) -> None:
    assert main(["--help"]) == 0
    listed = capsys.readouterr().out
    assert all(f"  {verb} " in listed for verb in VERBS)
    assert "gate" not in listed  # the study pages' word, not a newcomer's (docs/glossary.md)


@pytest.mark.parametrize("verb", IN_PROCESS)
def test_each_verb_has_its_own_help_under_its_own_name(verb: str, capsys) -> None:
    with pytest.raises(SystemExit) as done:
        main([verb, "--help"])
    assert done.value.code == 0
    assert capsys.readouterr().out.startswith(f"usage: fedpfn {verb} ")


@pytest.mark.parametrize(
    "argv, says",
    [
        (["runn"], "unknown verb 'runn'; did you mean run?"),
        (["compare", "--seeds", "0"], "fedpfn compare: give the algorithms first"),
        (["resume"], "fedpfn resume: give the run folder first"),
        (["run", "--num_clients", "3"], "did you mean --num-clients? (fedpfn run --help-all lists every flag)"),
        (["run", "--rounds", "0"], "rounds: 0 must be at least 1"),
        (["align", "--models", "1", "--out", "/nonexistent/x"], "models: 1 must be in [2, 64]"),
    ],
)
def test_a_bad_call_is_one_line_and_exit_2(argv: list[str], says: str, capsys, tmp_path: Path) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and says in err and err.count("\n") == 1, err


def test_a_comparison_of_one_algorithm_is_refused_before_anything_starts(tmp_path, monkeypatch, capsys) -> None:
    """`fedpfn compare fedavg --seeds 0` silently started a 20-round CNN run (issue 56)."""
    monkeypatch.chdir(tmp_path)  # the default --out, runs/compare, is relative to here
    assert main(["compare", "fedavg", "--seeds", "0"]) == 2
    err = capsys.readouterr().err
    assert err == (
        "error: compare: 'fedavg' alone has nothing to be compared with; name two or more, comma-separated "
        "(fedavg,fedpfn), or run one algorithm with fedpfn run\n"
    )
    assert list(tmp_path.iterdir()) == []


def test_no_verb_is_refused_with_the_list() -> None:
    done = subprocess.run([sys.executable, "-m", "fedpfn.cli.main"], capture_output=True, text=True, check=False)
    assert done.returncode == 2 and "verbs:" in done.stderr and done.stdout == ""


def test_the_installed_script_and_run_sim_are_the_same_command() -> None:
    """`pip install -e .` puts `fedpfn` beside the interpreter; run_sim.py is `fedpfn run` under its own name."""
    script = Path(sys.executable).parent / "fedpfn"
    assert script.is_file(), "pip install -e . installs the fedpfn command ([project.scripts])"
    for command, prog in (([str(script), "run"], "fedpfn run"), ([sys.executable, "run_sim.py"], "python run_sim.py")):
        done = subprocess.run([*command, "--nosuch"], capture_output=True, text=True, check=False)
        assert done.returncode == 2 and done.stderr == f"error: unknown flag --nosuch ({prog} --help-all lists every flag)\n"


def test_run_help_shows_the_first_settings_and_help_all_every_one(capsys) -> None:
    with pytest.raises(SystemExit):
        main(["run", "--help"])
    short = capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(["run", "--help-all"])
    full = capsys.readouterr().out
    flags = [line.split()[0] for line in short.splitlines() if line.startswith("  --")]
    assert len(flags) == 12 and "--algorithm" in flags and "--anchor-ratio" not in short
    assert "--help-all" in short and "--anchor-ratio" in full and "--prox-mu" in full
    every = len([line for line in full.splitlines() if line.startswith("  --")]) - 1  # less --help-all
    assert f"the 12 common settings of {every}; fedpfn run --help-all shows every one, grouped" in short


def test_the_closing_line_names_the_next_commands_ready_to_paste(tmp_path: Path) -> None:
    import shlex

    from fedpfn.runtime.progress import next_commands

    folder = tmp_path / "a run's folder"
    line = next_commands(folder, 20)
    assert f"fedpfn report {shlex.quote(str(folder))} " in line
    pasted = shlex.split(line.split("more rounds: ")[1])
    assert pasted == ["fedpfn", "resume", str(folder), "--rounds", "40"]


@pytest.mark.parametrize(("rounds", "suggested"), [(1, 2), (2, 4), (20, 40), (200, 400)])
def test_the_closing_line_suggests_as_many_rounds_again(rounds: int, suggested: int, tmp_path: Path) -> None:
    """After 2 rounds it suggested 12 (10 more, whatever the run's length): now the run's own length again."""
    from fedpfn.runtime.progress import next_commands

    assert next_commands(tmp_path, rounds).endswith(f" --rounds {suggested}")


def test_the_terminal_prints_accuracy_in_percent_as_the_pages_do(tmp_path: Path, capsys) -> None:
    """The round lines and the summary said 0.8443 where the README and the reports say 84.43 %."""
    from fedpfn.runtime.progress import Progress

    progress = Progress(2, tmp_path / "run.log", show=True)
    record = dict(test_accuracy=0.84434, test_loss=0.5, train_loss=0.6, num_clients=2, num_failures=0,
                  skipped=False, local_accuracy_before_mean=0.712, local_accuracy_after_mean=0.8)  # fmt: skip
    progress.round_done({**record, "round": 1, "seconds": 1.0}, [])
    progress.round_done({**record, "round": 2, "seconds": 1.0, "test_accuracy": None}, [])
    progress.summary({"rounds": 2, "wall_seconds": 3, "final_test_accuracy": 0.84434, "last5_mean_accuracy": 0.8,
                      "last5_window": "last 2 of 2 evaluated rounds", "bytes_up_total": 0, "bytes_down_total": 0,
                      "num_failures_total": 0})  # fmt: skip
    progress.close()
    first, second, done = capsys.readouterr().out.splitlines()[:3]
    assert "test acc 84.43 %" in first and "local 71.2 % -> 80.0 %" in first, first
    assert "test acc    -   " in second and second.index("loss") == first.index("loss"), second  # columns kept
    assert "final test accuracy 84.43 %, mean 80.00 % over the last 2" in done, done
    assert "0.84" not in first + done


@pytest.mark.parametrize(
    ("nbytes", "shown"),
    [(0, "0 B"), (812, "812 B"), (4_096, "4.1 kB"), (999_960, "1.0 MB"), (23_456_789, "23.5 MB"),
     (1.2e9, "1.2 GB"), (5e15, "5000.0 TB")],
)  # fmt: skip
def test_traffic_is_printed_in_the_unit_that_fits_it(nbytes: float, shown: str, tmp_path: Path, capsys) -> None:
    """A tiny model's traffic printed as "0.0 MB" (issue 56)."""
    from fedpfn.runtime.progress import Progress, amount

    assert amount(nbytes) == shown
    progress = Progress(1, None, show=True)
    progress.summary({"rounds": 1, "wall_seconds": 1, "final_test_accuracy": 0.5, "last5_mean_accuracy": 0.5,
                      "last5_window": "last 1", "bytes_up_total": nbytes, "bytes_down_total": 812,
                      "num_failures_total": 0})  # fmt: skip
    progress.close()
    assert f"  up {shown}, down 812 B, failures 0" in capsys.readouterr().out


def test_client_gpus_help_says_what_it_does_on_each_engine() -> None:
    """It said "(Ray)", though --client-gpus 0 is how the batched engine is kept off a GPU too."""
    from fedpfn.cli.simulate import build_parser

    shown = next(a.help for a in build_parser("fedpfn run")._actions if "--client-gpus" in a.option_strings)
    assert "batched engine" in shown and "Ray engine" in shown and "0: clients on the CPU on both engines" in shown


def test_cli_module_exit_code() -> None:
    """`python -m fedpfn.experiments.lmc` refuses in one line with exit 2, as a shell sees it."""
    proc = subprocess.run(
        [sys.executable, "-m", "fedpfn.experiments.lmc", "--models", "1", "--out", "/nonexistent/x"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 2 and proc.stderr == "error: models: 1 must be in [2, 64]\n"
