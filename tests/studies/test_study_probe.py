"""Issue 58's probe of `fedpfn study`, kept: a study file is someone else's file too.

Grouped by surface, each case as a careful user or an attacker would try it, checked for what a
user relies on: exit 2 with one `error:` line naming the key or file, no traceback, quickly;
the marker of planted code never written; nothing outside the study's folder changed. A new
surface of a study file gets its cases here, in its group.

- code: the code a study file names (a rule, server, wrapper, mod, model, dataset; in an arm,
  the shared flags, an axis, a tuned value, a part): `status` and `page` never import it, `run`
  only with `--trust-code`;
- children: the processes `--jobs N` starts see nothing of the current folder first;
- places: runs, page, stored results, template and cell folders stay in the folder the study runs
  in (no absolute path, no '..', no link followed, no FIFO, device or folder read as a file);
- shapes: malformed study files and stored results (deep nesting, wrong kinds, missing keys,
  millions of cells, 100,000 seeds, a format spec or cell pattern that would fill the memory);
- pages: labels, axis values, units and commands are shown as typed, never acted on.
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fedpfn.cli.main import main as fedpfn

SHARED = "--dataset fmnist --model mlp --num-clients 100 --clients-per-round 2 --rounds 1 --partition iid"
PLANTED = (  # every kind of code a setting may name, each writing the marker as its module is imported
    "import pathlib\npathlib.Path(__file__).with_name('ran').write_text('ran')\n"
    "from clients.base import ClientRule\n"
    "class Rule(ClientRule):\n    name = 'evil'\n"
    "def build(*a, **k):\n    raise SystemExit('built')\n"
)


def study(capsys, *argv: str) -> tuple[int, list[str], str]:
    """The command in this process: its exit code, its error lines, its output; timed to 15 s."""
    started = time.monotonic()
    code = fedpfn(["study", *argv])
    out, err = capsys.readouterr()
    assert time.monotonic() - started < 15, f"fedpfn study {' '.join(argv)} took more than 15 s"
    return code, err.splitlines(), out


def refused_in_one_line(capsys, *argv: str) -> str:
    """The command's one error line (exit 2, nothing on stdout, no traceback)."""
    code, lines, out = study(capsys, *argv)
    assert code == 2 and len(lines) == 1 and lines[0].startswith("error: study: "), (code, lines)
    assert out == "" and "Traceback" not in lines[0]
    return lines[0]


@pytest.fixture
def here(tmp_path: Path, monkeypatch) -> Path:
    """The folder the study runs in, holding a planted module `evilcode` (a user's code, or an attacker's)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("fedpfn.core.user_code._NAMED_BY_COMMAND", set())  # a fresh process has named nothing
    monkeypatch.delitem(sys.modules, "evilcode", raising=False)
    (tmp_path / "evilcode.py").write_text(PLANTED)
    return tmp_path


@pytest.fixture(autouse=True)
def registry_as_it_was():
    """A rule imported by one test stays registered in its process: not for the next test."""
    from clients import CLIENT_RULES

    before = dict(CLIENT_RULES)
    yield
    CLIENT_RULES.clear()
    CLIENT_RULES.update(before)


def write(folder: Path, text: str, name: str = "s.toml") -> str:
    (folder / name).write_text(f'runs = "runs/s"\nshared = "{SHARED}"\n{text}')
    return name


# --- code: what a study file names is imported only where the user typed --trust-code -----------

NAMING = {  # where in a study file code is named -> the file's text
    "an arm's rule": "[arms]\na = '--algorithm fedavg'\nb = '--algorithm evilcode:Rule'\n",
    "an anchored rule": "[arms]\na = '--algorithm fedpfn+evilcode:Rule'\n",
    "a server": "[arms]\na = '--server evilcode:Rule'\n",
    "a server wrapper": "[arms]\na = ['--server-wrap', 'evilcode:Rule']\n",
    "a client mod": "[arms]\na = '--client-mod evilcode:build'\n",
    "an attack": "[arms]\na = '--attack evilcode:Rule'\n",
    "a model": "[arms]\na = '--model evilcode:build'\n",
    "a dataset": "[arms]\na = 'dataset=evilcode:build'\n",
    "an axis value": "[arms]\na = ''\n[axes]\nalgorithm = ['fedavg', 'evilcode:Rule']\n",
    "a named axis value": "[arms]\na = ''\n[axes.kind]\nplain = '--lr 0.1'\nevil = '--algorithm evilcode:Rule'\n",
    "a tuned value": "[arms]\na = ''\n[tune]\nflag = '--algorithm'\nvalues = ['fedavg', 'evilcode:Rule']\n",
    "a part's arm": "[arms]\na = '--algorithm fedavg'\n[parts.more.arms]\nx = '--algorithm evilcode:Rule'\n",
}


@pytest.mark.parametrize("where", list(NAMING))
@pytest.mark.parametrize("verb", ["status", "page", "run"])
def test_a_study_files_code_is_never_imported_without_trust_code(here: Path, capsys, verb: str, where: str) -> None:
    name = write(here, NAMING[where] + "[page]\nout = 'p.md'\nstored = 'p.json'\ntext = 'x'\n")
    line = refused_in_one_line(capsys, verb, name)
    assert "names code 'evilcode:" in line and "--trust-code" in line
    assert not (here / "ran").exists() and not (here / "runs").exists() and not (here / "p.md").exists()


def test_run_with_trust_code_imports_what_the_study_file_names(here: Path, capsys) -> None:
    """The user typed the switch: the rule is imported (its marker written); the cell's other
    setting is then refused in one line, so nothing trains here."""
    name = write(here, "[arms]\na = '--algorithm evilcode:Rule --lr fast'\n")
    line = refused_in_one_line(capsys, "run", name, "--trust-code")
    assert (here / "ran").exists() and "lr: 'fast' is not a finite number" in line


def test_fedpfn_and_flowers_own_classes_need_no_flag(here: Path, capsys) -> None:
    name = write(here, "[arms]\na = '--server flwr.serverapp.strategy:FedMedian'\n")
    code, lines, out = study(capsys, "status", name)
    assert code == 0 and lines == [] and out.splitlines()[0] == "runs/s/a/s0  missing"


def test_a_page_from_its_stored_results_alone_imports_nothing(here: Path, capsys) -> None:
    """--stored reads no cell, so a study naming code may still write its page from stored results."""
    stored = '{"study": "s.toml", "cells": [], "chosen": null}'
    (here / "p.json").write_text(stored)
    name = write(here, NAMING["an arm's rule"] + "[page]\nout = 'p.md'\nstored = 'p.json'\ntext = '# P\\n'\n")
    code, lines, out = study(capsys, "page", "--stored", name)
    assert code == 0 and out == "wrote p.md\n" and not (here / "ran").exists()


# --- children: the processes a study starts see nothing of the current folder first -------------

SHADOW = "import pathlib\npathlib.Path(__file__).with_name('shadowed').write_text('ran')\nraise SystemExit('planted')\n"


def test_a_python_child_imports_nothing_from_the_current_folder(tmp_path: Path, monkeypatch) -> None:
    """The one helper every child goes through; a plain `python -c` in the same folder would run the plant."""
    from fedpfn.runtime.children import python_child

    monkeypatch.chdir(tmp_path)
    (tmp_path / "torch.py").write_text(SHADOW)
    argv, env = python_child("-c", "import torch, fedpfn; print(torch.__file__)")
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and not (tmp_path / "shadowed").exists() and "site-packages" in done.stdout
    plain = subprocess.run([sys.executable, "-c", "import torch"], capture_output=True, text=True, timeout=60)
    assert plain.returncode != 0 and (tmp_path / "shadowed").exists()  # the plant would have run


@pytest.mark.slow  # two 1-round cells in processes of their own: about 20 to 40 s on 2 busy cores
def test_the_cells_jobs_start_never_import_a_planted_torch(tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "torch.py").write_text(SHADOW)
    name = write(tmp_path, "[arms]\na = '--algorithm fedavg'\nb = '--algorithm fedprox'\n")
    assert fedpfn(["study", "run", name, "--jobs", "2"]) == 0, capsys.readouterr()
    assert not (tmp_path / "shadowed").exists()
    assert (tmp_path / "runs/s/a/s0/summary.json").is_file() and (tmp_path / "runs/s/b/s0/summary.json").is_file()


# --- places: every path a study file names stays in the folder the study runs in -----------------

PAGE = "[page]\nout = 'p.md'\nstored = 'p.json'\ntext = '# P\\n<!-- study: arms -->\\n'\n"
ARMS = "[arms]\na = '--algorithm fedavg'\nb = '--algorithm fedpfn'\n"
OUTSIDE = {  # the study file's text -> what the refusal names
    "a page written outside": (ARMS + PAGE.replace("'p.md'", "'../victim.md'"), "page.out = '../victim.md' lies outside"),
    "a page by absolute path": (ARMS + PAGE.replace("'p.md'", "'{victim}'"), "page.out = '{victim}' lies outside"),
    "a page under /dev": (ARMS + PAGE.replace("'p.md'", "'/dev/full'"), "page.out = '/dev/full' lies outside"),
    "stored results outside": (ARMS + PAGE.replace("'p.json'", "'../x/p.json'"), "page.stored = '../x/p.json' lies"),
    "a template read from /etc": (ARMS + PAGE.replace("text = '# P\\n<!-- study: arms -->\\n'", "template = '/etc/passwd'"),
                                  "page.template = '/etc/passwd' lies outside"),
    "runs outside": ("runs = '../elsewhere'\n" + ARMS, "runs = '../elsewhere' lies outside"),
    "a cell pattern climbing out": ("cell = '{arm}/../../../x{seed}'\n" + ARMS, "gives '"),
    "an axis value climbing out": (ARMS + "[axes]\nlr = ['../../../../x']\n", "gives '"),
    "an arm named '..'": ("cell = '{arm}/../../x'\n[arms]\n'..' = ''\n", "gives '"),
    "a page over code": (ARMS + PAGE.replace("'p.md'", "'evil.py'"), "page.out = 'evil.py' is not a .md file"),
    "stored results over the study": (ARMS + PAGE.replace("'p.json'", "'s.toml'"), "page.stored = 's.toml' is not a .json"),
    "an empty runs": ("runs = ''\n" + ARMS, "runs = '' is not a path inside"),
    "runs of the wrong kind": ("runs = 5\n" + ARMS, "runs = 5 is not a path (text)"),
}  # fmt: skip


@pytest.fixture
def victim(tmp_path: Path) -> Path:
    """A file outside the study's folder, which nothing the study does may change."""
    (tmp_path / "victim.md").write_text("mine")
    (tmp_path / "study").mkdir()
    return tmp_path / "victim.md"


def unchanged(victim: Path) -> bool:
    return victim.read_text() == "mine" and sorted(p.name for p in victim.parent.iterdir()) == ["study", "victim.md"]


@pytest.mark.parametrize("case", list(OUTSIDE))
@pytest.mark.parametrize("verb", ["status", "run", "page"])
def test_a_path_outside_the_studys_folder_is_refused(victim: Path, monkeypatch, capsys, case: str, verb: str) -> None:
    monkeypatch.chdir(victim.parent / "study")
    text, says = (part.replace("{victim}", str(victim)) for part in OUTSIDE[case])
    (victim.parent / "study" / "s.toml").write_text(text if "runs =" in text else f"runs = 'runs/s'\nshared = '{SHARED}'\n{text}")
    line = refused_in_one_line(capsys, verb, "s.toml")
    assert says in line, line
    assert unchanged(victim) and sorted(p.name for p in (victim.parent / "study").iterdir()) == ["s.toml"]


def stored_cells(*arms: str, command: str = "fedpfn run --seed 0") -> str:
    import json

    return json.dumps({"study": "s.toml", "chosen": None, "cells": [
        {"arm": arm, "point": {}, "seed": 0, "folder": f"runs/s/{arm}/s0", "command": command, "endpoints": {}}
        for arm in arms]})  # fmt: skip


LINKED = {  # what is planted in the study's folder -> which key the refusal names
    "the runs folder": (lambda d, v: (d / "runs").symlink_to(v.parent, target_is_directory=True), "runs: 'runs' is a"),
    "a cell's folder": (lambda d, v: ((d / "runs/s/a").mkdir(parents=True), (d / "runs/s/a/s0").symlink_to(v.parent)),
                        "runs: 'runs/s/a/s0' is a symbolic link"),
    "the page": (lambda d, v: (d / "p.md").symlink_to(v), "page.out: 'p.md' is a symbolic link"),
    "the stored results": (lambda d, v: (d / "p.json").symlink_to("/etc/passwd"), "page.stored: 'p.json' is a symbolic"),
}  # fmt: skip


@pytest.mark.parametrize("case", list(LINKED))
def test_a_link_planted_in_the_studys_folder_is_never_followed(victim: Path, monkeypatch, capsys, case: str) -> None:
    here = victim.parent / "study"
    monkeypatch.chdir(here)
    (here / "s.toml").write_text(f"runs = 'runs/s'\nshared = '{SHARED}'\n{ARMS}{PAGE}")
    plant, says = LINKED[case]
    plant(here, victim)
    verbs = [["page", "--stored"]] if case in ("the page", "the stored results") else [["status"], ["run"], ["page"]]
    for verb in verbs:
        line = refused_in_one_line(capsys, *verb, "s.toml")
        assert says in line, line
    assert victim.read_text() == "mine" and sorted(p.name for p in victim.parent.iterdir()) == ["study", "victim.md"]


NOT_FILES = {  # what stands where the page reads or writes -> what the refusal says
    "a FIFO as the template": ("fifo", "template = 'in.md'", "page.template: cannot read in.md: not a regular file"),
    "a folder as the template": ("dir", "template = 'in.md'", "page.template: cannot read in.md: not a regular file"),
    "a folder as the page": ("out", "text = 'x'", "page.out: 'p.md' is not a file"),
    "a template too large": ("big", "template = 'in.md'", "page.template: cannot read in.md: larger than 1048576"),
    "a template missing": ("", "template = 'in.md'", "page.template: 'in.md' does not exist"),
}  # fmt: skip


@pytest.mark.parametrize("case", list(NOT_FILES))
def test_what_is_no_plain_file_is_refused_at_once(tmp_path: Path, monkeypatch, capsys, case: str) -> None:
    import os

    monkeypatch.chdir(tmp_path)
    kind, source, says = NOT_FILES[case]
    page = f"[page]\nout = 'p.md'\nstored = 'p.json'\n{source}\n"
    (tmp_path / "s.toml").write_text(f"runs = 'runs/s'\nshared = '{SHARED}'\n{ARMS}{page}")
    (tmp_path / "p.json").write_text(stored_cells("a", "b"))
    if kind == "fifo":
        os.mkfifo(tmp_path / "in.md")  # a read would wait for a writer forever
    elif kind == "dir":
        (tmp_path / "in.md").mkdir()
    elif kind == "out":
        (tmp_path / "p.md").mkdir()
    elif kind == "big":
        with open(tmp_path / "in.md", "wb") as big:
            big.truncate(2 << 20)
    line = refused_in_one_line(capsys, "page", "--stored", "s.toml")
    assert says in line, line


# --- shapes: malformed study files and stored results, one line naming the key, at once -----------

DEEP = 3000
SHAPES = {  # the study file's text -> what the refusal says
    "arrays thousands deep": ("seeds = " + "[" * DEEP + "]" * DEEP + "\n" + ARMS, "nests tables or arrays deeper than"),
    "tables thousands deep": ("x = " + "{a = " * DEEP + "1" + "}" * DEEP + "\n" + ARMS, "nests tables or arrays deeper"),
    "arrays nine deep": (ARMS + "[axes]\nlr = " + "[" * 9 + "]" * 9 + "\n", "axes.lr[0][0][0][0][0][0][0] nests"),
    "a format filling the memory": (ARMS + "[endpoints.e]\nmetric = 'test_accuracy'\nformat = '.999999999f'\n",
                                    "endpoints.e.format = '.999999999f' is not a number's format spec"),
    "a cell pattern filling the memory": ("cell = '{arm:>999999999}'\n" + ARMS, "holds {arm:>999999999}, more than a name in braces"),
    "a million cells": (ARMS + "[axes]\nlr = [" + ",".join(map(str, range(1000))) + "]\nmomentum = ["
                        + ",".join(map(str, range(1000))) + "]\n", "declares 2,000,000 cells"),
    "100,000 seeds": (f"seeds = [{','.join(map(str, range(100_000)))}]\n" + ARMS, "seeds = [0, 1, 2, 3,"),
    "10,000 arms": ("[arms]\n" + "".join(f"a{i} = ''\n" for i in range(10_000)), "declares 10,000 cells"),
    "seeds of the wrong kind": ("seeds = 'all'\n" + ARMS, "seeds = 'all' is not a list of 1 to 1000 whole numbers"),
    "an axis of tables": (ARMS + "[axes]\nlr = [{a = 1}]\n", "axes.lr[0] = {'a': 1} is not a flag's value"),
    "a tuned value of lists": (ARMS + "[tune]\nflag = '--lr'\nvalues = [[0.1]]\n", "tune.values[0] = [0.1] is not"),
    "a page without its out": (ARMS + "[page]\nstored = 'p.json'\ntext = 'x'\n", "page.out is missing"),
    "a label of the wrong kind": (ARMS + "[labels]\na = 3\n", "labels.a = 3 is not a string"),
}  # fmt: skip


@pytest.mark.parametrize("case", list(SHAPES))
def test_a_malformed_study_file_is_one_line_naming_the_key(tmp_path: Path, monkeypatch, capsys, case: str) -> None:
    monkeypatch.chdir(tmp_path)
    text, says = SHAPES[case]
    (tmp_path / "s.toml").write_text(text)
    line = refused_in_one_line(capsys, "status", "s.toml")
    assert says in line and len(line) < 600, line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.toml"]


STORED = {  # the stored results -> what the refusal says
    "not JSON": ("{'cells': ", "page.stored: p.json is not valid JSON"),
    "an array": ("[1, 2]", "page.stored: p.json holds list, not the JSON object"),
    "no cells": ('{"endpoints": {}}', "page.stored: p.json has no list 'cells' (found None)"),
    "cells of text": ('{"cells": "all"}', "has no list 'cells' (found 'all')"),
    "a cell of the wrong kind": ('{"cells": [3]}', "cells[0] is 3, not an object"),
    "a seed of text": (stored_cells("a").replace('"seed": 0', '"seed": "0"'), "cells[0].seed is '0', not int"),
    "an arm not declared": (stored_cells("zz"), "cells[0].arm 'zz' is not an arm of the study"),
    "an endpoint missing": (stored_cells("a").replace('"endpoints": {}', '"endpoints": {"x": 1}'),
                            "cells[0].endpoints.acc is None, not a number or null"),
    "an endpoint of text": (stored_cells("a").replace('"endpoints": {}', '"endpoints": {"acc": "high"}'),
                            "cells[0].endpoints.acc is 'high', not a number or null"),
    "nested too deep": ("[" * 100 + "]" * 100, "page.stored: p.json nests deeper than 64 levels"),
}  # fmt: skip


@pytest.mark.parametrize("case", list(STORED))
def test_malformed_stored_results_are_one_line_and_no_page(tmp_path: Path, monkeypatch, capsys, case: str) -> None:
    monkeypatch.chdir(tmp_path)
    page = PAGE.replace("[page]", "[endpoints.acc]\nmetric = 'test_accuracy'\n[page]")
    (tmp_path / "s.toml").write_text(f"runs = 'runs/s'\nshared = '{SHARED}'\n{ARMS}{page}")
    stored, says = STORED[case]
    (tmp_path / "p.json").write_text(stored)
    line = refused_in_one_line(capsys, "page", "--stored", "s.toml")
    assert says in line, line
    assert not (tmp_path / "p.md").exists()


def test_a_readings_stored_results_of_another_shape_are_one_line(tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.chdir(tmp_path)
    page = "[page]\nout = 'p.md'\nstored = 'p.json'\nreadings = 'studies.earlier.readings:READINGS'\ntext = \"<!-- study: earlier -->\\n\"\n"
    (tmp_path / "s.toml").write_text(f"runs = 'runs/s'\nshared = '{SHARED}'\n{ARMS}{page}")
    (tmp_path / "p.json").write_text('{"what": "else"}')
    line = refused_in_one_line(capsys, "page", "--stored", "s.toml", "--trust-code")
    assert "page.stored: p.json does not hold what the page reads (KeyError" in line, line
    assert not (tmp_path / "p.md").exists()


def test_stored_results_past_their_bound_are_refused_before_they_are_parsed(tmp_path: Path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "s.toml").write_text(f"runs = 'runs/s'\nshared = '{SHARED}'\n{ARMS}{PAGE}")
    with open(tmp_path / "p.json", "wb") as wide:
        wide.truncate((32 << 20) + 1)
    line = refused_in_one_line(capsys, "page", "--stored", "s.toml")
    assert "page.stored: cannot read p.json: larger than 33554432 bytes" in line


# --- pages: what came from a file is shown as typed, never acted on ------------------------------


def test_a_page_escapes_labels_points_units_and_commands(tmp_path: Path, monkeypatch, capsys) -> None:
    import json

    monkeypatch.chdir(tmp_path)
    label = "<img src=x onerror=alert(1)>|x\\n# Heading [a](javascript:alert(1))"
    text = (f"runs = 'runs/s'\nshared = '{SHARED}'\n{ARMS}[labels]\na = \"{label}\"\n[axes]\nlr = ['0.1|<b>']\n"
            "[endpoints.acc]\nmetric = 'test_accuracy'\nunit = '</td><script>'\n[families.f]\nendpoint = 'acc'\n"
            "[page]\nout = 'p.md'\nstored = 'p.json'\n"
            'text = "# P\\n<!-- study: arms -->\\n<!-- study: family f -->\\n<!-- study: commands -->\\n"\n')  # fmt: skip
    (tmp_path / "s.toml").write_text(text)
    command = "fedpfn run `</code><script>alert(1)</script>`"
    cells = [{"arm": arm, "point": {"lr": "0.1|<b>"}, "seed": seed, "folder": "f", "command": command,
              "endpoints": {"acc": 0.5 + 0.01 * seed * (arm == "b")}} for arm in ("a", "b") for seed in (0, 1, 2)]  # fmt: skip
    (tmp_path / "p.json").write_text(json.dumps({"study": "s.toml", "chosen": None, "cells": cells}))
    code, lines, out = study(capsys, "page", "--stored", "s.toml")
    assert code == 0 and lines == [], lines
    page = (tmp_path / "p.md").read_text()
    spans = [line for line in page.splitlines() if line.endswith("`` fedpfn run `</code><script>alert(1)</script>` ``")]
    assert len(spans) == 2  # a code span no backtick closes early: shown as typed
    outside = page.replace("`` fedpfn run `</code><script>alert(1)</script>` ``", "")
    assert "<img" not in outside and "<script>" not in outside and "<b>" not in outside and "</td>" not in outside
    assert [line for line in page.splitlines() if line.startswith("#")] == ["# P"]  # no heading from a label
    assert "\\[a\\](javascript:" in page and not re.search(r"(?<!\\)\]\(javascript:", page)  # no link
    rows = [line for line in page.splitlines() if line.startswith("| ")]
    assert all(line.count("|") - line.count("\\|") == rows[0].count("|") - rows[0].count("\\|") for line in rows[:3])


def test_a_stored_section_naming_a_folder_outside_reads_nothing_there(tmp_path: Path, monkeypatch, capsys) -> None:
    """The earlier study's stored results name the folders of its reports: never '..' or a link."""
    monkeypatch.chdir(tmp_path)
    page = "[page]\nout = 'p.md'\nstored = 'kept/p.json'\nreadings = 'studies.earlier.readings:READINGS'\ntext = \"<!-- study: earlier -->\\n\"\n"
    (tmp_path / "s.toml").write_text(f"runs = 'runs/s'\nshared = '{SHARED}'\n{ARMS}{page}")
    (tmp_path / "kept").mkdir()
    for name, says in (("../..", "sections[].name = '../..' lies outside"), ("r", "page.stored: 'kept/r' is a symbolic")):
        (tmp_path / "kept/p.json").write_text('{"sections": [{"name": "%s"}]}' % name)
        (tmp_path / "kept/r").unlink(missing_ok=True)
        (tmp_path / "kept/r").symlink_to("/etc", target_is_directory=True)
        line = refused_in_one_line(capsys, "page", "--stored", "s.toml", "--trust-code")
        assert says in line, line


def test_cells_sharing_a_folder_are_refused_before_any_runs(tmp_path: Path, monkeypatch, capsys) -> None:
    """`cell = "all"` gives every cell one folder: refused while planning, not after the first cell ran."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "s.toml").write_text(f"runs = 'runs/s'\ncell = 'all'\nshared = '{SHARED}'\n{ARMS}")
    for verb in ("status", "run"):
        line = refused_in_one_line(capsys, verb, "s.toml")
        assert "cells 'a seed 0' and 'b seed 0' share the folder runs/s/all" in line, line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.toml"]


def test_a_family_named_to_climb_out_writes_no_report_outside(victim: Path, monkeypatch, capsys) -> None:
    """The drift reading writes each family's report beside the stored results, by the family's name."""
    here = victim.parent / "study"
    monkeypatch.chdir(here)
    (here / "s.toml").write_text(
        f"runs = 'runs/s'\nshared = '{SHARED}'\n{ARMS}[axes]\nalpha = ['0.1']\n[tune]\nflag = '--lr'\nvalues = ['0.1']\n"
        "[endpoints.acc]\nmetric = 'test_accuracy'\n[families.'x/../../../../y']\nendpoint = 'acc'\n"
        "[page]\nout = 'p.md'\nstored = 'p-page.json'\nreadings = 'studies.drift.readings:READINGS'\ntext = \"<!-- study: drift -->\\n\"\n"
    )  # fmt: skip
    (here / "p-page.json").write_text("{}")
    line = refused_in_one_line(capsys, "page", "--stored", "s.toml", "--trust-code")
    assert "the report of family 'x/../../../../y' at alpha '0.1'" in line and "lies outside" in line, line
    assert unchanged(victim)


@pytest.mark.parametrize("field, says", [("{summary.__class__.__mro__}", "holds {summary.__class__.__mro__}"),
                                          ("{summary:>999999999}", "holds {summary:>999999999}"),
                                          ("{nope}", "names {nope}, which is not filled (names: summary,")])  # fmt: skip
def test_a_gate_template_fills_names_alone(tmp_path: Path, monkeypatch, capsys, field: str, says: str) -> None:
    """The gate's page fills its template with str.format: a file's template reads no attribute, fills no memory."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "s.toml").write_text("command = 'lmc'\nruns = 'runs/g'\n[arms]\na = '--model mlp'\n[page]\n"
                                     "out = 'p.md'\nstored = 'cells.json'\nreadings = 'studies.alignment_gate.readings:READINGS'\ntemplate = 't.md'\n")  # fmt: skip
    (tmp_path / "t.md").write_text(f"# Gate\n{field}\n")
    (tmp_path / "cells.json").write_text("{}")
    line = refused_in_one_line(capsys, "page", "--stored", "s.toml", "--trust-code")
    assert says in line, line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cells.json", "s.toml", "t.md"]  # no page, no figure
