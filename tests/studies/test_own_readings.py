"""A study's own readings module (fedpfn.study.readings), as a user writes one beside a study of
their own: `fedpfn study page --trust-code` keeps what it reads and writes its sections, and
`--stored` writes the same bytes again; without `--trust-code` the page is refused in one line and
the module is never imported (a marker it would write on import stays absent); `status` never
imports it. The project's studies (studies/*/readings.py) are loaded the same way."""

from __future__ import annotations

from pathlib import Path

import pytest

from fedpfn.cli.main import main as fedpfn

READINGS = '''
import json
from pathlib import Path

from fedpfn.core.files import METRICS, read_jsonl
from fedpfn.study.cells import main_cells
from fedpfn.study.readings import Readings

Path("imported.txt").write_text("imported")  # what planted code would do: the test looks for it


def keep(spec):
    rows = {c.label(): len(read_jsonl(c.folder / METRICS)) for c in main_cells(spec)}
    spec.page.stored.write_text(json.dumps(rows))


def rounds(spec):
    return [f"- {label}: {n} rounds" for label, n in spec.stored_results().items()]


READINGS = Readings(keep=keep, sections={"rounds": rounds})
'''
STUDY = """title = "own readings"
runs = "runs/own"
seeds = [0]
shared = "--dataset fmnist --model mlp --num-clients 20 --clients-per-round 2 --rounds 1 --batch-size 64 --partition iid"

[arms]
fedavg = "--algorithm fedavg"

[endpoints.acc]
metric = "test_accuracy"

[page]
out = "page.md"
stored = "page.json"
readings = "PACKAGE.readings:READINGS"
text = '''# Own readings

<!-- study: rounds -->
'''
"""


@pytest.fixture
def own(tmp_path: Path, monkeypatch) -> Path:
    """A study and its readings package in a folder of their own, the test's current folder; the
    package named after the test, so no other test's module of the same name is found first."""
    monkeypatch.chdir(tmp_path)
    package = "own_" + "".join(c if c.isalnum() else "_" for c in tmp_path.name)
    (tmp_path / package).mkdir()
    (tmp_path / package / "readings.py").write_text(READINGS)
    (tmp_path / "study.toml").write_text(STUDY.replace("PACKAGE", package))
    return tmp_path


def refused(capsys, *argv: str) -> str:
    """The one line a refused command prints (exit 2)."""
    assert fedpfn(["study", *argv]) == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.strip().splitlines()) == 1, err
    return err.strip()


def test_a_study_with_its_own_readings_writes_its_page_as_the_projects_do(own: Path, capsys) -> None:
    assert fedpfn(["study", "status", "study.toml"]) == 0  # status needs no flag: it never imports the readings
    assert not (own / "imported.txt").exists()
    assert fedpfn(["study", "run", "study.toml"]) == 0
    assert not (own / "imported.txt").exists()  # nor does run
    capsys.readouterr()

    assert fedpfn(["study", "page", "study.toml", "--trust-code"]) == 0
    assert (own / "imported.txt").exists()
    page = (own / "page.md").read_bytes()
    assert page == b"# Own readings\n\n- fedavg seed 0: 1 rounds\n"
    (own / "page.md").unlink()
    assert fedpfn(["study", "page", "--stored", "study.toml", "--trust-code"]) == 0
    assert (own / "page.md").read_bytes() == page


@pytest.mark.parametrize("stored", [False, True])
def test_a_studys_own_readings_are_refused_without_trust_code(own: Path, capsys, stored: bool) -> None:
    (own / "page.json").write_text('{"fedavg seed 0": 1}')
    line = refused(capsys, "page", *["--stored"] * stored, "study.toml")
    package = next(p.name for p in own.iterdir() if p.name.startswith("own_"))
    again = "--stored " * stored
    assert line == (f"error: study: study.toml: page.readings names code '{package}.readings:READINGS', which a file "
                    f"alone never makes fedpfn import; give --trust-code (fedpfn study page {again}study.toml "
                    "--trust-code) if you trust the file's code")  # fmt: skip
    assert not (own / "imported.txt").exists() and not (own / "page.md").exists()


@pytest.mark.parametrize(("value", "said"), [
    ('"own"', "page.readings = 'own' is not a dotted path; give package.module:NAME, a module of the study's own"),
    ('"own.readings:"', "page.readings = 'own.readings:' is not a dotted path"),
    ('"../own:READINGS"', "page.readings = '../own:READINGS' is not a dotted path"),
    ("3", "page.readings = 3 is not a string"),
])  # fmt: skip
def test_a_readings_key_that_is_no_dotted_path_is_refused_as_the_file_is_read(own: Path, capsys, value: str,
                                                                               said: str) -> None:  # fmt: skip
    text = (own / "study.toml").read_text()
    (own / "study.toml").write_text("\n".join(f"readings = {value}" if line.startswith("readings") else line
                                              for line in text.splitlines()))  # fmt: skip
    line = refused(capsys, "status", "study.toml")
    assert line.startswith(f"error: study: study.toml: {said}"), line
    assert not (own / "imported.txt").exists()


def test_a_readings_path_naming_something_else_is_one_line(own: Path, capsys) -> None:
    text = (own / "study.toml").read_text()
    (own / "study.toml").write_text(text.replace("readings:READINGS", "readings:keep"))
    (own / "page.json").write_text("{}")
    line = refused(capsys, "page", "--stored", "study.toml", "--trust-code")
    assert line.endswith("names function, not a fedpfn.study.readings.Readings (keep, sections, whole, partial)"), line


def test_a_page_never_written_from_its_runs_says_the_command_with_its_flag(own: Path, capsys) -> None:
    line = refused(capsys, "page", "--stored", "study.toml", "--trust-code")
    assert line == ("error: study: study.toml: page.json is missing: the page was never written from the runs "
                    "(fedpfn study page study.toml --trust-code); nothing written"), line
