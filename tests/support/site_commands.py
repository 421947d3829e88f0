"""The commands the README and the site's pages show, checked as a newcomer types them
(tests/integration/test_newcomer.py runs the README's, tests/integration/test_docs_site.py every page's).

A command runs as written in a fresh copy of the checkout, up to where training would start:
`fedpfn run`, `compare`, `resume`, `align` and `study` in this process (the functions the
installed `fedpfn` calls), `fedpfn --help` through the installed command, the scripts and the
other programs as subprocesses.
One that cannot run here (a real deployment's hosts, a Ray cluster, hours of training, the
network, the machine's firewall) has its reason in tests/support/not_run.py; tests/integration/test_docs_site.py lists
each such command as skipped with that reason, after checking what can be checked here: its
flags against its --help, a run's settings, a `flwr run`'s run config.
"""

from __future__ import annotations

import functools
import importlib
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
from fedpfn.experiments import lmc
from fedpfn.runtime import env
from fedpfn.runtime.algorithms import from_run_config, load_config, validated
from tests.support.commands import in_process, no_engine_starts
from tests.support.not_run import NotRun, why_not_run

ROOT = Path(__file__).resolve().parents[2]
SUBPROCESS_ENV = {**os.environ, **env.FLOWER_DEFAULTS}
NOT_COPIED = (".venv", "runs", ".git", "__pycache__", "*.egg-info", ".pytest_cache")
# The first word of a line in a plain ``` block that makes it a block of commands (the pages
# scripts write carry no language on their fences); other plain blocks show output or files.
COMMAND_WORDS = ("python", "nice", "fedpfn", "flwr", "make", ".venv/bin/python", "scripts/")
VENV_TOOLS = ("fedpfn", "flwr", "ray", "tensorboard", "flower-superlink", "flower-supernode")


class EngineReached(Exception):
    """Raised where the engine would start: every check has passed and the folder is claimed."""


def reach_engine(*argv: str) -> None:
    with pytest.raises(EngineReached):
        run_sim.main(list(argv))


def as_a_newcomer(copy: Path, monkeypatch) -> None:
    """Commands typed in the copy, `~` its home; where an engine would start, EngineReached."""
    monkeypatch.chdir(copy)
    monkeypatch.setenv("HOME", str(copy / "home"))

    def engine_start(run, tracker, app) -> None:
        raise EngineReached

    no_engine_starts(monkeypatch, engine_start)


# --- a page's commands -----------------------------------------------------------------------------


def fenced_blocks(text: str) -> list[tuple[str, str]]:
    """(language, body) of every fenced block, indented ones (in lists) included."""
    blocks, language, body = [], None, []
    for line in text.splitlines():
        fence = re.match(r"\s*```(\w*)", line)
        if fence and language is None:
            language, body = fence[1], []
        elif fence:
            blocks.append((language, "\n".join(body)))
            language = None
        elif language is not None:
            body.append(line)
    return blocks


def page_commands(page: Path) -> list[str]:
    """Every command of a page's ```bash blocks and of its plain blocks of commands, in order;
    continued lines joined."""
    commands = []
    for language, body in fenced_blocks(page.read_text()):
        first = next((line.split()[0] for line in body.splitlines() if line.strip()), "")
        if language == "bash" or (language == "" and first.startswith(COMMAND_WORDS)):
            commands += [
                line for line in body.replace("\\\n", " ").splitlines() if shlex.split(line, comments=True)
            ]
    return commands


def program_words(part: str) -> list[str]:
    """A command's words without `nice -n N` and VAR=value in front (each such name one of
    Flower's or Ray's switches: a misspelt one would be ignored without a word)."""
    words = shlex.split(part, comments=True)
    while words and "=" in words[0] and not words[0].startswith("-"):
        name = words.pop(0).split("=", 1)[0]
        assert name in env.FLOWER_DEFAULTS or name.startswith("RAY_"), f"unknown switch {name} in `{part}`"
    if words[:2] == ["nice", "-n"]:
        words = words[3:]
    return words


# --- commands that cannot run here -------------------------------------------------------------------


def check_not_run(copy: Path, words: list[str], not_run: NotRun) -> None:
    """What can be checked here of a command that cannot run."""
    match not_run.checked:
        case "help":
            check_help(copy, words)
        case "settings":  # as the command checks them: a flag the run would not use is refused too
            from fedpfn.cli.simulate import given_names, settings_from_args

            values = settings_from_args(run_sim.parse_args(words[2:]))
            validated(run_sim.config_from_args(dict(values)), given_names(values))
        case "run config":
            check_flwr_run(copy, words[2:])


@functools.cache
def help_text(copy: Path, program: tuple[str, ...]) -> str:
    """A program's --help, as the activated venv finds it (a tool outside the venv would be another's);
    fedpfn's, and `python -m fedpfn.experiments.X`'s, printed by the function the installed command
    or the module calls, in this process (cwd: the copy)."""
    if program[0] in VENV_TOOLS:
        found = shell(copy, f". .venv/bin/activate && command -v {program[0]}")
        assert found.returncode == 0 and found.stdout.strip().endswith(f".venv/bin/{program[0]}"), found
        if program[0] == "fedpfn":
            shown = fedpfn_here(shlex.join([*program, "--help"]))
        else:
            shown = shell(copy, f". .venv/bin/activate && {shlex.join(program)} --help")
    elif program[1:2] == ("-m",) and program[2].startswith("fedpfn.experiments."):  # sys.exit(main()), as verbs
        main = importlib.import_module(program[2]).main
        shown = in_process(list(program), lambda: main(["--help"]))
    else:
        shown = shell(copy, shlex.join([*program, "--help"]))
    assert shown.returncode == 0, shown.stderr[-2000:]
    return shown.stdout


def check_help(copy: Path, words: list[str]) -> None:
    """The program prints its --help, and it names every flag the command gives."""
    depth = 3 if words[:2] == ["flwr", "supernode"] or words[1:2] == ["-m"] else 1
    depth = 2 if depth == 1 and words[0] in ("python", ".venv/bin/python", "flwr", "ray", "fedpfn") else depth
    depth = 3 if words[:2] == ["fedpfn", "study"] else depth  # a study verb's flags are in its own --help
    program = [".venv/bin/python" if words[0] == "python" else words[0], *words[1:depth]]
    shown = help_text(copy, tuple(program))
    args = words[depth:]
    args = args[: args.index("--")] if "--" in args else args  # what follows `--` is another program's
    flags = [found[1] for word in args if (found := re.fullmatch(r"\[?(--?[a-zA-Z][\w-]*)(=.*)?\]?", word))]
    missing = [flag for flag in flags if not re.search(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", shown)]
    assert not missing, f"{shlex.join(program)} --help does not name {missing}"


# --- running them ------------------------------------------------------------------------------------


def fresh_checkout(tmp_path_factory) -> Path:
    """The checkout's files without runs or caches, the venv linked in: a fresh clone after `make`."""
    copy = tmp_path_factory.mktemp("clone") / "fedpfn"
    shutil.copytree(ROOT, copy, ignore=shutil.ignore_patterns(*NOT_COPIED), symlinks=True)
    (copy / ".venv").symlink_to(ROOT / ".venv")
    page = (ROOT / "docs" / "guide" / "algorithms.md").read_text()
    strategy = re.search(
        r"```python\n(.*?)```", page[page.index("## Custom server strategies") :], re.DOTALL
    )[1]
    (copy / "my_strategy.py").write_text(strategy)  # "saved as my_strategy.py"
    (copy / "my_rule.py").write_text(extending_page_rule())  # "saved as my_rule.py", development/extending.md
    (copy / "home").mkdir()
    return copy


def extending_page_rule() -> str:
    """The client rule of your own that docs/development/extending.md shows, as the reader saves it."""
    page = (ROOT / "docs" / "development" / "extending.md").read_text()
    return re.search(r"```python\n(.*?)```", page[page.index("## A client rule of your own") :], re.DOTALL)[1]


def shell(copy: Path, command: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", command], cwd=copy, check=False, capture_output=True, text=True,
                          timeout=120, env={**SUBPROCESS_ENV, "HOME": str(copy / "home")})  # fmt: skip


def fedpfn_here(part: str) -> subprocess.CompletedProcess:
    """A `fedpfn` command run in this process, in the copy (the cwd), as the tutorial's test runs
    the tutorial's: its exit code and printed text, the same as a subprocess gives them, without
    starting Python, torch and the runtime again (2.8 s of a `fedpfn study status` of 3.7 s). The
    copy's files are the checkout's, so a study's readings (--trust-code) import as the checkout's;
    the copy that the command adds to sys.path to find them is taken off again."""
    from fedpfn.cli.main import main as fedpfn

    words = program_words(part)
    assert words[0] == "fedpfn", part
    return in_process(words, lambda: fedpfn(words[1:]))


def check_run_sim(copy: Path, args: list[str]) -> None:
    """--help prints and exits 0; any other command reaches its engine (or LMC's training) with every check passed."""
    if args == ["--help"]:
        with pytest.raises(SystemExit) as done:
            run_sim.main(args)
        assert done.value.code == 0
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
    checks, and a local federation has one SuperNode per client."""
    from flwr.common.config import fuse_dicts, parse_config_args

    options, rest = {}, list(args)  # --flag value pairs; the app's folder, a federation, --stream aside
    while rest:
        word = rest.pop(0)
        if word.startswith("--") and rest and not rest[0].startswith("--"):
            options[word] = rest.pop(0)
    declared = tomllib.loads((copy / "pyproject.toml").read_text())["tool"]["flwr"]["app"]["config"]
    run_config = parse_config_args([options["--run-config"]]) if "--run-config" in options else {}
    cfg = load_config(from_run_config(dict(fuse_dicts(declared, run_config))))  # as the ServerApp reads it
    if "--federation-config" in options:
        assert parse_config_args([options["--federation-config"]])["num-supernodes"] == cfg.federation.num_clients


def check(copy: Path, command: str, monkeypatch) -> None:
    """One command, each part of a `&&` chain in turn; an unknown kind of command fails, and one
    that cannot run here is left to tests/integration/test_docs_site.py's list."""
    for part in command.split("&&"):
        words = program_words(part)
        if why_not_run(words) is None:
            run_part(copy, part, words, monkeypatch)


def run_part(copy: Path, part: str, words: list[str], monkeypatch) -> None:
    """Runs one command (or checks what it would run) in the copy."""
    match words:
        case ["make", target]:
            planned = shell(copy, f"make -n {target}")
            assert planned.returncode == 0 and ". .venv/bin/activate" in planned.stdout, planned.stderr
            runs = [
                line for line in planned.stdout.splitlines() if line.startswith(".venv/bin/python run_sim.py")
            ]
            assert runs or target != "run", planned.stdout
            for line in runs:  # what it would run, checked as the README's own commands are
                check_run_sim(copy, shlex.split(line)[2:])
        case [".", ".venv/bin/activate"]:
            activated = shell(copy, ". .venv/bin/activate && command -v python && python -c 'import fedpfn'")
            assert activated.returncode == 0 and activated.stdout.strip().endswith(".venv/bin/python")
        case ["mkdir" | "export", *_]:
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
        case ["fedpfn", "align", *args] | ["python", "-m", "fedpfn.experiments.lmc", *args]:
            check_lmc(copy, args, monkeypatch)
        case ["python3", "-m", "venv", *_]:
            assert shell(copy, "python3 -m venv --help").returncode == 0
        case ["pip", "install", "-e", spec]:  # the extras it names exist (the venv is the one make built)
            extras = tomllib.loads((copy / "pyproject.toml").read_text())["project"]["optional-dependencies"]
            assert spec.startswith(".[") and set(spec[2:-1].split(",")) <= set(extras), spec
        case ["python", "-m", "fedpfn.runtime.env", *_]:  # prints activate's lines (make writes them)
            shown = shell(copy, ".venv/bin/python -m fedpfn.runtime.env")
            assert shown.returncode == 0 and "FLWR_TELEMETRY_ENABLED" in shown.stdout, shown.stderr
        case ["flwr", "run", ".", *args]:
            check_flwr_run(copy, [".", *args])
        case [*_, "--help"]:
            check_help(copy, words)
        case _:
            run_script(copy, part, words)


def run_script(copy: Path, part: str, words: list[str]) -> None:
    """The project's scripts: each runs as written in the fresh copy, where no study has run."""
    match words:
        case ["fedpfn", "study", "status", _]:
            done = fedpfn_here(part)
            assert done.returncode == 0 and " cells: " in done.stdout, done.stderr[-2000:]
        case ["fedpfn", "study", "page", "studies/drift/drift.toml" | "studies/alignment_federated/alignment_federated.toml"
              | "studies/earlier/earlier.toml" as study, "--trust-code"]:  # a study's own readings: --trust-code
            page = {"studies/drift/drift.toml": "docs/results.md", "studies/earlier/earlier.toml": "docs/results_earlier.md"}.get(
                study, "docs/alignment_federated.md"
            )
            unchanged(copy, part, page, 2, "cells are not finished")
        case ["fedpfn", "study", "page", "studies/alignment_gate/alignment_gate.toml", "--trust-code"]:  # the kept cells
            done = fedpfn_here(part)
            assert done.returncode == 0 and "wrote docs/alignment.md" in done.stdout, done.stderr[-2000:]
            for kept in ("docs/alignment.md", "docs/alignment/cells.json"):
                assert (copy / kept).read_bytes() == (ROOT / kept).read_bytes(), f"{part.strip()} changed {kept}"
        case ["fedpfn", "study", "page", "studies/fusion/soup.toml" | "studies/fusion/cold.toml", "--trust-code"]:
            unchanged(copy, part, "docs/fusion.md", 2, "does not exist")  # no pretrained start here
        case ["fedpfn", "study", "page", _] | ["fedpfn", "study", "page", _, "--trust-code"]:
            done = fedpfn_here(part)
            assert done.returncode == 2 and "cells are not finished" in done.stderr, done.stderr[-2000:]
        case ["python", "scripts/export_partition.py", *args]:
            done = shell(copy, ".venv/bin/" + part.strip())
            assert done.returncode == 0, done.stderr[-2000:]
            written = [arg.split("=", 1)[1] for arg in args if re.fullmatch(r"\d+=.+", arg)]
            assert written and all((copy / folder / "partition.json").is_file() for folder in written), (
                done.stdout
            )
        case ["scripts/make_certs.sh", *args]:
            done = shell(copy, part)
            assert done.returncode == 0, done.stderr[-2000:]
            assert all((copy / args[-1] / name).is_file() for name in ("ca.crt", "server.pem", "server.key"))
        case ["ssh-keygen", *_]:  # a SuperNode host's key, in this copy's home
            done = shell(copy, part)
            assert done.returncode == 0, done.stderr[-2000:]
        case _:
            pytest.fail(f"tests/support/site_commands.py has no check for the command: {part.strip()}")


def unchanged(copy: Path, part: str, page: str, code: int, says: str) -> None:
    """A page script in a copy with no runs: it refuses with `code`, saying `says`, and the page stays."""
    done = fedpfn_here(part)
    assert done.returncode == code and says in done.stderr, (done.returncode, done.stderr[-2000:])
    assert (copy / page).read_bytes() == (ROOT / page).read_bytes(), f"{part.strip()} rewrote {page}"
