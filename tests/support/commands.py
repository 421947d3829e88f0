"""The commands called in this process: their exit code and what they wrote, and the guard that
no engine starts where a refusal is expected."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from collections.abc import Callable
from contextlib import redirect_stderr, redirect_stdout, suppress
from pathlib import Path

import pytest

import run_sim
from fedpfn.cli.main import main as fedpfn

def refused(capsys, monkeypatch, *args: str) -> list[str]:
    """Run in-process; assert exit 2 and no traceback; return the error lines.

    A refusal must come before any run starts: were one to slip through, the test fails at
    once instead of training a default-sized federation.
    """

    def must_not_start(*_args, **_kwargs):
        raise AssertionError(f"run_sim {' '.join(args)} was not refused: an engine was about to start")

    no_engine_starts(monkeypatch, must_not_start)
    with pytest.raises(SystemExit) as exit_info:
        sys.exit(run_sim.main(list(args)))
    err = capsys.readouterr().err
    assert exit_info.value.code == 2, err
    assert "Traceback" not in err
    return [line for line in err.splitlines() if line.strip()]


def snapshot(path: Path) -> dict[str, bytes]:
    return {str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()}


def toml(tmp_path: Path, text: str | bytes, name: str = "preset.toml") -> str:
    path = tmp_path / name
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    return str(path)


ENV = {**os.environ, "FLWR_TELEMETRY_ENABLED": "0", "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1"}


def passes_checks(monkeypatch, *args: str) -> bool:
    """Whether run_sim gets as far as starting an engine (which is then not started)."""
    started = []
    no_engine_starts(monkeypatch, lambda run, tracker, app: started.append(run))
    with suppress(RuntimeError):  # "ended without finishing": no engine ran
        run_sim.main(list(args))
    return bool(started)


def call(capsys, *argv: str) -> tuple[int, list[str]]:
    """`fedpfn ARGV` in this process: its exit status and its stderr lines."""
    try:
        code = fedpfn(list(argv))
    except SystemExit as stop:
        code = stop.code
    return code, capsys.readouterr().err.splitlines()


def no_engine_starts(monkeypatch, engine_run) -> None:
    """Every engine's `run` replaced by `engine_run`: what a test sees when a run would start."""
    import dataclasses

    from fedpfn.runtime.engines.registry import ENGINES

    for name, engine in ENGINES.items():
        monkeypatch.setitem(ENGINES, name, dataclasses.replace(engine, run=engine_run))


def run_main(main, argv: list[str], capsys) -> tuple[int, str]:
    """An analysis command's `main` called in-process: its exit code (argparse's own refusals
    included) and what it wrote to stderr."""
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse's own refusals
        code = exc.code
    return code, capsys.readouterr().err


def in_process(words: list[str], call: Callable[[], int]) -> subprocess.CompletedProcess:
    """`call`, the main of the program `words` names, in this process: its exit code and printed
    text as a subprocess gives them; what it adds to sys.path is taken off again."""
    out, err, path = io.StringIO(), io.StringIO(), list(sys.path)
    try:
        with redirect_stdout(out), redirect_stderr(err):
            try:
                code = call()
            except SystemExit as exit_:  # argparse's refusals and --help
                code = exit_.code if isinstance(exit_.code, int) else 1
    finally:
        sys.path[:] = path
    return subprocess.CompletedProcess(words, code, out.getvalue(), err.getvalue())
