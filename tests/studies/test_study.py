"""`fedpfn study`: a study declared in one TOML file, through status, run, page and page --stored;
a second run reuses every cell; a cell whose folder holds other settings is refused; bad input is
one line with exit 2 before any run starts (and no folder is left behind)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fedpfn.cli.main import main as fedpfn
from fedpfn.cli.study import configure

TINY = """title = "tiny"
runs = "runs/tiny"
seeds = [0, 1]
shared = "--dataset fmnist --model mlp --num-clients 100 --clients-per-round 2 --rounds 2 --batch-size 64 --partition iid"

[arms]
fedavg = "--algorithm fedavg"
fedpfn = "--algorithm fedpfn"

[endpoints.acc]
metric = "test_accuracy"
last = 2

[families.primary]
endpoint = "acc"

[page]
out = "page.md"
stored = "page.json"
text = '''# Tiny

<!-- study: arms -->

<!-- study: family primary -->

<!-- study: commands -->
'''
"""
CELLS = ("runs/tiny/fedavg/s0", "runs/tiny/fedavg/s1", "runs/tiny/fedpfn/s0", "runs/tiny/fedpfn/s1")


def study(capsys, *argv: str) -> tuple[int, str, str]:
    code = fedpfn(["study", *argv])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def tiny(tmp_path: Path, monkeypatch) -> Path:
    monkeypatch.chdir(tmp_path)  # a study's paths are relative to where it runs, as every --out is
    (tmp_path / "tiny.toml").write_text(TINY)
    return tmp_path


def test_help_lists_the_verbs(capsys) -> None:
    with pytest.raises(SystemExit) as done:
        fedpfn(["study", "--help"])
    out = capsys.readouterr().out
    assert done.value.code == 0 and all(f"\n    {verb} " in out for verb in ("status", "run", "page"))
    assert fedpfn(["--help"]) == 0 and "\n  study " in capsys.readouterr().out  # fedpfn --help names it


@pytest.mark.slow  # about 1 to 2 min on 2 busy cores: four 2-round runs, then everything read again
def test_a_tiny_study_end_to_end(tiny: Path, capsys) -> None:
    code, out, _ = study(capsys, "status", "tiny.toml")
    assert code == 0 and out.splitlines()[:4] == [f"{cell}  missing" for cell in CELLS]
    assert out.splitlines()[4].startswith("4 cells: 4 missing; 8 rounds left; the time left is known once")
    code, out, _ = study(capsys, "page", "tiny.toml")  # nothing finished: no page, no stored results
    assert code == 2 and not (tiny / "page.md").exists() and not (tiny / "page.json").exists()

    code, out, _ = study(capsys, "run", "tiny.toml")
    assert code == 0 and out.count("finished earlier") == 0
    for cell in CELLS:
        assert (tiny / cell / "summary.json").is_file()
    code, out, _ = study(capsys, "status", "tiny.toml")
    assert out.splitlines()[-1] == "4 cells: 4 done; nothing left to run"

    code, out, _ = study(capsys, "page", "tiny.toml")
    assert code == 0 and out == "wrote page.md\n"
    page = (tiny / "page.md").read_text()
    stored = json.loads((tiny / "page.json").read_text())
    assert [c["folder"] for c in stored["cells"]] == list(CELLS)
    accuracies = [json.loads(line)["test_accuracy"] for line in (tiny / CELLS[0] / "metrics.jsonl").open()]
    assert stored["cells"][0]["endpoints"]["acc"] == pytest.approx(sum(accuracies) / 2)
    for cell in stored["cells"]:  # each cell's code and machine, from its run's config.json
        assert {"git", "packages", "device"} <= set(cell["provenance"]) and "torch_threads" in cell["provenance"]["device"]
    assert "machines or library sets" not in page and "machine not recorded" not in page  # one machine: no word
    assert "| fedavg | 2 | " in page and "| fedpfn − fedavg | " in page
    assert "`fedpfn run --dataset fmnist" in page and "--seed 0 --out runs/tiny/fedpfn/s0`" in page

    (tiny / "page.md").unlink()
    for cell in CELLS:  # from the stored results alone: the same bytes without the runs
        (tiny / cell / "metrics.jsonl").rename(tiny / cell / "gone")
    code, out, _ = study(capsys, "page", "--stored", "tiny.toml")
    assert code == 0 and (tiny / "page.md").read_text() == page
    for cell in CELLS:
        (tiny / cell / "gone").rename(tiny / cell / "metrics.jsonl")

    code, out, _ = study(capsys, "run", "tiny.toml")  # again: every cell reused, none run
    assert code == 0 and out.count("finished earlier with the same settings, reused") == 4
    assert "round " not in out


def finished_cell(folder: Path, flags: list[str]) -> None:
    """A cell's folder as a finished run leaves it (config.json, summary.json), without training."""
    cfg = configure([*flags, "--out", str(folder)])
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps({**cfg.to_dict(), "provenance": {"git": "abc"}}))
    (folder / "summary.json").write_text(json.dumps({"wall_seconds": 4.0, "rounds": 2}))


def test_a_cell_with_other_settings_is_refused_before_any_run(tiny: Path, capsys) -> None:
    shared = "--dataset fmnist --model mlp --num-clients 100 --clients-per-round 2 --rounds 2 --batch-size 64 --partition iid"
    finished_cell(tiny / CELLS[0], [*shared.split(), "--algorithm", "fedavg", "--seed", "0"])
    finished_cell(tiny / CELLS[1], [*shared.split(), "--algorithm", "fedavg", "--seed", "1", "--lr", "0.1"])
    code, out, _ = study(capsys, "status", "tiny.toml")
    lines = out.splitlines()
    assert lines[0] == f"{CELLS[0]}  done" and lines[1].startswith(f"{CELLS[1]}  refused: {CELLS[1]} holds a run with")
    assert lines[-1].startswith("4 cells: 1 done, 1 refused (other settings), 2 missing; 6 rounds left, about")
    assert "at 2.00 s a round (1 finished cell, 1 at a time)" in lines[-1]
    code, out, err = study(capsys, "run", "tiny.toml")
    assert code == 2 and out == ""
    assert err == (f"error: study: {CELLS[1]} holds a run with other settings: lr 0.1 != 0.05; use another --out\n")
    assert not (tiny / CELLS[2]).exists()  # nothing started


BAD = {
    "not TOML": ("seeds = [0,", "is not valid TOML"),
    "unknown key": ("sedes = [0]\n[arms]\na = '--algorithm fedavg'", "unknown key 'sedes' (accepted: title, runs,"),
    "value run refuses": ("[arms]\na = '--algorithm fedavg --lr fast'", "bad.toml: a seed 0: lr: 'fast' is not a finite number"),
    "setting the arm's rule ignores": ("[arms]\na = '--algorithm fedavg --prox-mu 0.1'",
                                       "a seed 0: prox_mu: 0.1 is set, but fedavg with server fedavg does not use it"),
    "unknown flag": ("[arms]\na = '--algorithm fedavg --bogus 1'", "unknown flag --bogus"),
    "the study's flag": ("[arms]\na = '--algorithm fedavg --seed 3'", "arms.a: --seed is the study's to set"),
    "unknown endpoint": ("[arms]\na = '--algorithm fedavg'\nb = '--algorithm fedpfn'\n[families.f]\nendpoint = 'acc'",
                         "families.f.endpoint: unknown endpoint 'acc' (declared: none)"),
    "unknown statistic": ("[arms]\na = '--algorithm fedavg'\n[endpoints.acc]\nmetric = 'test_accuracy'\nstatistic = 'mode'",
                          "endpoints.acc.statistic = 'mode' is not accepted (accepted: mean, median)"),
    "unknown metric": ("[arms]\na = '--algorithm fedavg'\n[endpoints.acc]\nmetric = 'accuracy'",
                       "endpoints.acc.metric: unknown metric 'accuracy' (accepted: test_accuracy,"),
    "a margin not above 0": ("[arms]\na = '--algorithm fedavg'\nb = '--algorithm fedpfn'\n[endpoints.acc]\n"
                             "metric = 'test_accuracy'\n[families.f]\nendpoint = 'acc'\nmargin = -0.5",
                             "families.f.margin = -0.5: give a positive number, in the endpoint's unit"),
}


@pytest.mark.parametrize("case", list(BAD))
@pytest.mark.parametrize("verb", ["status", "run"])
def test_bad_input_is_one_line_and_exit_2_before_any_run(tiny: Path, case: str, verb: str, capsys) -> None:
    text, says = BAD[case]
    (tiny / "bad.toml").write_text(text)
    code, out, err = study(capsys, verb, "bad.toml")
    assert code == 2 and out == "" and err.count("\n") == 1 and err.startswith("error: study: ")
    assert says in err
    assert not (tiny / "runs").exists()


def test_a_missing_file_and_a_bad_jobs_are_one_line(tiny: Path, capsys) -> None:
    code, _, err = study(capsys, "run", "nope.toml")
    assert code == 2 and err == "error: study: file 'nope.toml' does not exist\n"
    code, _, err = study(capsys, "run", "tiny.toml", "--jobs", "0")
    assert code == 2 and err == "error: --jobs 0: give a whole number of cells at a time, 1 or more\n"


def test_a_stopped_cell_and_a_running_one_are_told_apart(tiny: Path, capsys) -> None:
    """A folder with config.json and no summary is stopped (run resumes it); one whose lock another
    process holds is running, and `run` waits for nothing: it says so in one line."""
    import fcntl

    shared = "--dataset fmnist --model mlp --num-clients 100 --clients-per-round 2 --rounds 2 --batch-size 64 --partition iid"
    for cell, seed in ((CELLS[0], 0), (CELLS[1], 1)):
        finished_cell(tiny / cell, [*shared.split(), "--algorithm", "fedavg", "--seed", str(seed)])
        (tiny / cell / "summary.json").unlink()
    (tiny / CELLS[0] / "metrics.jsonl").write_text('{"round": 1, "test_accuracy": 0.5}\n')
    with open(tiny / CELLS[1] / ".fedpfn.lock", "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)  # as a run holds its folder
        code, out, _ = study(capsys, "status", "tiny.toml")
        assert out.splitlines()[:2] == [f"{CELLS[0]}  stopped at round 1 of 2 (run resumes it)", f"{CELLS[1]}  running"]
        code, out, err = study(capsys, "run", "tiny.toml")
        assert code == 2 and err == (f"error: study: {CELLS[1]} is being run by another process now; wait for it, "
                                     "or stop it and run the study again\n")  # fmt: skip


def test_jobs_run_each_cell_in_a_process_of_its_own_at_most_one_a_core(tiny: Path, monkeypatch, capsys) -> None:
    """--jobs N starts `fedpfn study run FILE --cell FOLDER` for each unfinished cell, N at a time,
    each on a share of the cores of its own (its engine trains on them: one worker a core)."""
    import fedpfn.study.runner as runner
    from fedpfn.runtime.children import Children

    started = []
    monkeypatch.setattr(runner, "usable_cores", lambda: {0, 1})
    monkeypatch.setattr(Children, "run", lambda self, command, **_: started.append(command) or 0)
    code, out, _ = study(capsys, "run", "tiny.toml", "--jobs", "3")
    assert code == 0 and "--jobs 3: this machine has 2 cores; running 2 cells at a time" in out
    assert sorted(c[-1] for c in started) == list(CELLS)
    assert all(c[1:3] == ["-P", "-c"] and c[4:9] == ["study", "run", "tiny.toml", "--cell", c[-1]] for c in started)
    assert {c[3] for c in started} == {runner.ON_CORES.format([0]), runner.ON_CORES.format([1])}


def test_a_study_shares_the_cores_among_its_cells_disjoint_and_even() -> None:
    from fedpfn.runtime.resources import core_shares

    assert core_shares(2, {0, 1}) == [{0}, {1}]
    assert core_shares(2, {0, 1, 2, 3, 4}) == [{0, 1}, {2, 3, 4}]
    assert core_shares(8, {3, 5}) == [{3}, {5}]  # at most one cell a core
    assert core_shares(1, {0, 1, 2}) == [{0, 1, 2}]


def test_one_cell_by_its_folder_is_refused_when_the_study_has_none_there(tiny: Path, capsys) -> None:
    code, _, err = study(capsys, "run", "tiny.toml", "--cell", "runs/tiny/nope")
    assert code == 2 and err == "error: study: tiny.toml has no cell in 'runs/tiny/nope'\n"


def test_an_endpoint_reads_the_mean_or_the_median_of_its_window_and_a_row_of_clients_as_their_mean(tiny: Path) -> None:
    """The window is the last `last` rows that have the metric; a list (one value a client) is its mean."""
    from fedpfn.study.page import endpoint_value
    from fedpfn.study.spec import load

    endpoints = """
[endpoints.first]
metric = "align_client_permutation_loss_changes"
last = 3
[endpoints.mid]
metric = "align_client_permutation_loss_changes"
last = 3
statistic = "median"
"""
    (tiny / "ends.toml").write_text(TINY.replace("[families.primary]", endpoints + "[families.primary]"))
    spec = load(tiny / "ends.toml")
    rows = [[9.0, 9.0], None, [1.0, 3.0], [0.0, 0.0], [10.0, 20.0]]  # the first falls out of the window
    (tiny / "metrics.jsonl").write_text("".join(
        json.dumps({"round": r, "align_client_permutation_loss_changes": v}) + "\n" for r, v in enumerate(rows, 1)
    ))  # fmt: skip
    assert endpoint_value(spec, tiny, "first") == pytest.approx((2.0 + 0.0 + 15.0) / 3)
    assert endpoint_value(spec, tiny, "mid") == 2.0


def test_a_margin_says_smaller_only_when_the_whole_interval_lies_inside_it() -> None:
    """An equivalence margin declared before the runs (families.NAME.margin, in the page's unit): inside
    ±margin the difference is smaller; an interval that reaches it rules nothing out, whatever its mean."""
    from fedpfn.analysis.inference import paired
    from fedpfn.study.page import margin_text

    base = {s: 0.8 for s in range(6)}
    small = paired("x", "acc", {s: 0.8 + 0.001 * (-1) ** s for s in range(6)}, base)  # within ±0.1 points
    wide = paired("x", "acc", {s: 0.8 + 0.01 * (-1) ** s for s in range(6)}, base)  # mean 0, interval about ±1 point
    assert margin_text(small, 0.5, 100, "points").startswith("smaller than the margin of ±0.5 points")
    assert margin_text(wide, 0.5, 100, "points").startswith("a difference of ±0.5 points or more")
