"""Issue 42's "Reading folders it did not write" and issue 45's labels injected into reports.

`fedpfn report` reads run folders that anyone may have written: every file through the checked
readers (no link, FIFO or device followed or read; sizes and nesting bounded), every value it
computes with of the type the tool writes, each refusal one line with exit 2 naming the file.
A label that is Markdown or HTML is shown as typed in report.md, never rendered.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from fedpfn.analysis.markup import code, inline
from fedpfn.cli.main import main as fedpfn
from tests.support.folders import write_run


def report(capsys, *argv: str | Path) -> tuple[int, list[str]]:
    code_ = fedpfn(["report", *map(str, argv)])
    return code_, capsys.readouterr().err.splitlines()


def edit(path: Path, change) -> None:
    """Rewrite a JSON (or JSON-lines) file through `change` (of its object, or of each row)."""
    if path.suffix == ".jsonl":
        rows = [json.loads(line) for line in path.read_text().splitlines()]
        path.write_text("".join(json.dumps(change(row)) + "\n" for row in rows))
    else:
        path.write_text(json.dumps(change(json.loads(path.read_text()))))


def with_key(key: str, value: Any):
    return lambda obj: {**obj, key: value}


DEEP = json.loads("[" * 100 + "]" * 100)

BAD_VALUES = [
    ("config.json", "seed", [0], "seed is [0], not a whole number >= 0 and <= 4294967295"),
    ("config.json", "seed", "0", 'seed is "0", not a whole number'),
    ("config.json", "rounds", "2", 'rounds is "2", not a whole number >= 1'),
    ("config.json", "rounds", 10**18, "holds rounds 1, 2; a finished run holds 1-1000000000000000000 once each"),
    ("config.json", "rounds", True, "rounds is true, not a whole number"),
    ("config.json", "lr", DEEP, "nests deeper than 64 levels"),
    ("metrics.jsonl", "test_accuracy", "high", 'test_accuracy is "high", not an accuracy in [0, 1] or null'),
    ("metrics.jsonl", "test_accuracy", [0.5], "test_accuracy is [0.5], not an accuracy"),
    ("metrics.jsonl", "bytes_up", "many", 'bytes_up is "many", not a whole number of bytes'),
    ("metrics.jsonl", "bytes_down", 10**30, "bytes_down is 1000000000000000000000000000000, not a whole"),
    ("metrics.jsonl", "round", [1], "round is [1], not a whole number >= 1"),
    ("metrics.jsonl", "test_loss", DEEP, "nests deeper than 64 levels"),
]


@pytest.mark.parametrize("name, key, value, says", BAD_VALUES, ids=[f"{n}-{k}-{str(v)[:12]}" for n, k, v, _ in BAD_VALUES])
def test_a_value_of_the_wrong_type_or_size_is_refused_in_one_line(name, key, value, says, tmp_path, capsys):
    run = write_run(tmp_path / "runs" / "fedavg-s0", [0.5, 0.6], seed=0)
    edit(run / name, with_key(key, value))
    code_, lines = report(capsys, tmp_path / "runs")
    assert code_ == 2 and len(lines) == 1 and lines[0].startswith("error: runs: ") and says in lines[0], lines
    assert str(run) in lines[0] and not (tmp_path / "runs" / "report.md").exists()


def test_a_number_too_long_to_convert_is_refused(tmp_path, capsys):
    run = write_run(tmp_path / "runs" / "fedavg-s0", [0.5, 0.6], seed=0)
    (run / "config.json").write_text((run / "config.json").read_text()[:-1] + ', "lr": ' + "9" * 5000 + "}")
    code_, lines = report(capsys, tmp_path / "runs")
    assert code_ == 2 and lines == [f"error: runs: cannot read {run / 'config.json'} "
                                    f"({run / 'config.json'} holds a number too long to read)"]  # fmt: skip


def test_a_config_that_is_a_link_is_never_read(tmp_path, capsys):
    run = write_run(tmp_path / "runs" / "fedavg-s0", [0.5, 0.6], seed=0)
    (run / "config.json").rename(tmp_path / "config-elsewhere.json")  # a valid config, beside the folder
    (run / "config.json").symlink_to(tmp_path / "config-elsewhere.json")
    code_, lines = report(capsys, tmp_path / "runs")
    assert code_ == 2 and len(lines) == 1 and "a symbolic link, which fedpfn never follows" in lines[0], lines


def test_a_config_that_links_to_dev_zero_is_never_read(tmp_path):
    """In a process of its own with its memory bounded: a reader that followed the link would
    fill this machine's memory, not fail the test."""
    run = write_run(tmp_path / "runs" / "fedavg-s0", [0.5, 0.6], seed=0)
    (run / "config.json").unlink()
    (run / "config.json").symlink_to("/dev/zero")
    bounded = f"import resource; resource.setrlimit(resource.RLIMIT_DATA, ({4 << 30}, {4 << 30}))"
    done = subprocess.run(
        [sys.executable, "-c", f"{bounded}; from fedpfn.cli.main import main; raise SystemExit(main())",
         "report", str(tmp_path / "runs")], capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr[-2000:]
    assert "a symbolic link, which fedpfn never follows" in done.stderr


@contextmanager
def unblocking(fifo: Path, after: float = 20.0) -> Iterator[None]:
    """If a reader is stuck opening `fifo` (the bug), give it an end of file after `after` seconds,
    so that a failing test ends instead of hanging the suite."""

    def unblock() -> None:
        try:
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        except OSError:
            pass  # nobody is reading: nothing to unblock

    timer = threading.Timer(after, unblock)
    timer.start()
    try:
        yield
    finally:
        timer.cancel()


def test_a_config_that_is_a_fifo_does_not_hang(tmp_path, capsys):
    run = write_run(tmp_path / "runs" / "fedavg-s0", [0.5, 0.6], seed=0)
    (run / "config.json").unlink()
    os.mkfifo(run / "config.json")
    started = time.monotonic()
    with unblocking(run / "config.json"):
        code_, lines = report(capsys, tmp_path / "runs")
    assert time.monotonic() - started < 10, "the FIFO was opened and waited on"
    assert code_ == 2 and len(lines) == 1 and "not a regular file" in lines[0], lines


# --- labels copied into report.md ------------------------------------------------------------------

INJECTED = {
    "algorithm": "<img src=x onerror=alert(1)>",
    "server": "[click](http://evil.example)|x\n# heading",
}


def test_labels_from_a_foreign_run_are_shown_as_typed_in_report_md(tmp_path, capsys):
    for seed in (0, 1, 2):
        write_run(tmp_path / "runs" / f"a-s{seed}", [0.5, 0.6], seed=seed)
        write_run(tmp_path / "runs" / f"b-s{seed}", [0.6, 0.7], seed=seed, **INJECTED)
    assert fedpfn(["report", str(tmp_path / "runs"), "--baseline", "fedavg"]) == 0
    text = (tmp_path / "runs" / "report.md").read_text()
    assert "<img" not in text and "](http" not in text.replace("\\](http", "") and "\n# heading" not in text
    assert "&lt;img src=x onerror=alert(1)&gt;" in text and "\\[click\\](http://evil.example)\\|x \\# heading" in text
    assert "|x" not in text.replace("\\|x", "")  # no cell split where the label has a bar
    stored = json.loads((tmp_path / "runs" / "report.json").read_text())
    assert {arm["arm"].split()[0] for arm in stored["arms"]} == {"fedavg", INJECTED["algorithm"].split()[0]}


@pytest.mark.parametrize(
    "raw, shown",
    [
        ("fedpfn anchor_ratio=0.4", "fedpfn anchor_ratio=0.4"),  # what the tool writes reads as it did
        ("_a_ *b* `c` ~d~ a|b", "\\_a\\_ \\*b\\* \\`c\\` \\~d\\~ a\\|b"),
        ("<b>&amp;</b>", "&lt;b&gt;&amp;amp;&lt;/b&gt;"),
        ("line\nbreak\r\x00", "line break "),
    ],
)
def test_inline_shows_text_as_typed(raw, shown):
    assert inline(raw) == shown


def test_a_command_with_backticks_stays_one_code_span():
    assert code("run --x `rm -rf /`") == "`` run --x `rm -rf /` ``"


# --- a partition folder handed to a SuperNode --------------------------------------------------------


@pytest.mark.parametrize(
    "damage, says",
    [
        ("meta-fifo", "no readable partition.json (cannot read"),
        ("meta-link", "a symbolic link, which fedpfn never follows"),
        ("x-link", "train_x.npy: a symbolic link, which fedpfn never follows; export it again"),
        ("x-fifo", "train_x.npy: not a regular file; export it again"),
        ("x-bytes", "its arrays cannot be read"),
        ("settings-list", "not a fedpfn-partition/1 folder; export it again"),
        ("shape-number", "the arrays do not match partition.json; export again"),
    ],
)
def test_a_partition_folder_is_read_as_data(damage, says, tmp_path):
    from tests.support.config import tiny_config

    from fedpfn.runtime.nodedata import META, X, PartitionDataError, read_partition, write_partition

    cfg, folder = tiny_config(), tmp_path / "part"
    write_partition(cfg, 0, folder)
    what, how = damage.split("-")
    target = folder / (META if what in ("meta", "settings", "shape") else X)
    if how in ("fifo", "link"):
        target.rename(tmp_path / target.name)
        os.mkfifo(target) if how == "fifo" else target.symlink_to(tmp_path / target.name)
    elif how == "bytes":
        target.write_bytes(os.urandom(256))
    else:
        edit(target, with_key("settings", []) if what == "settings" else with_key("input_shape", 5))
    started = time.monotonic()
    with pytest.raises(PartitionDataError) as refused, unblocking(target):
        read_partition(cfg, 0, folder)
    assert says in str(refused.value) and "\n" not in str(refused.value) and time.monotonic() - started < 10


@pytest.mark.parametrize("kind", ["fifo", "link"])
def test_a_cold_runs_config_is_never_read_through(kind, tmp_path, capsys):
    """`fedpfn cold` reads its settings off the study's runs (RUNS/ARM/sSEED/config.json); one that
    is a FIFO or a link is refused in one line, never opened or followed, and nothing is written."""
    runs = tmp_path / "runs"
    record = runs / "plain" / "s0" / "config.json"
    record.parent.mkdir(parents=True)
    os.mkfifo(record) if kind == "fifo" else record.symlink_to("/dev/zero")
    with unblocking(record):
        code_ = fedpfn(["cold", "--runs", str(runs), "--out", str(tmp_path / "out"), "--seeds", "0"])
    lines = capsys.readouterr().err.splitlines()
    said = [line for line in lines if "config.json" in line]
    why = "not a regular file" if kind == "fifo" else "a symbolic link, which fedpfn never follows"
    assert code_ == 2 and len(said) == 1 and why in said[0] and said[0].startswith("error: runs: "), lines
    assert not (tmp_path / "out").exists()
