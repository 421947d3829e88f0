"""A study page's `<!-- study: against Y X -->` marker: endpoint Y drawn against endpoint X, as the
privacy page draws accuracy against ε (its title promised that axis; issue 56), an arm without an X
(no noise: ε infinite) a dashed level named in the key; a marker naming an endpoint the study
lacks is refused in one line, nothing written."""

from __future__ import annotations

import re
import shutil
import tomllib
from pathlib import Path

from fedpfn.analysis.plots import ArmPoint, against_figure
from fedpfn.cli.main import main as fedpfn

ROOT = Path(__file__).parents[2]


def privacy_copy(tmp_path: Path) -> str:
    """The privacy study, its template and its stored results copied under tmp_path; the study's path."""
    study = next(ROOT.glob("studies/**/privacy.toml")).relative_to(ROOT)
    page = tomllib.loads((ROOT / study).read_text())["page"]
    for path in (str(study), page["template"], page["stored"]):
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / path, tmp_path / path)
    return str(study)


def test_the_privacy_page_draws_accuracy_against_epsilon(tmp_path: Path, monkeypatch, capsys) -> None:
    study = privacy_copy(tmp_path)
    monkeypatch.chdir(tmp_path)
    assert fedpfn(["study", "page", "--stored", study]) == 0
    links = re.findall(r"!\[[^]]*\]\(([^)]+)\)", (tmp_path / "docs/guide/privacy-results.md").read_text())
    assert links == ["../study/privacy-last5-against-epsilon.png"]
    drawn = (tmp_path / "docs/guide" / links[0]).resolve().read_bytes()
    assert drawn == (ROOT / "docs/study/privacy-last5-against-epsilon.png").read_bytes()  # as committed


def test_the_x_axis_is_the_second_endpoint_and_an_arm_without_one_is_a_level() -> None:
    lines = {"algorithm=fedavg": [ArmPoint("no noise", [(None, 85.2)]), ArmPoint("z = 0.5", [(34.2, 72.9)]),
                                  ArmPoint("z = 2.0", [(4.37, 9.3)])]}  # fmt: skip
    fig = against_figure(lines, "accuracy against ε", ("last5, points", "ε, client-level"), "ε")
    ax = fig.axes[0]
    assert (ax.get_xlabel(), ax.get_ylabel()) == ("ε, client-level", "last5, points")
    mean_line = next(line for line in ax.get_lines() if line.get_linestyle() == "-")
    assert list(mean_line.get_xdata()) == [4.37, 34.2] and list(mean_line.get_ydata()) == [9.3, 72.9]
    level = next(line for line in ax.get_lines() if line.get_linestyle() == "--")
    assert list(level.get_ydata()) == [85.2, 85.2]
    keys = [t.get_text() for t in fig.legends[0].get_texts()]
    assert "algorithm=fedavg: no noise (no ε)" in keys
    assert sorted(t.get_text() for t in ax.texts) == ["z = 0.5", "z = 2.0"]


def test_an_unknown_endpoint_in_the_marker_is_refused_in_one_line(
    tmp_path: Path, monkeypatch, capsys
) -> None:
    study = privacy_copy(tmp_path)
    template = tmp_path / tomllib.loads((tmp_path / study).read_text())["page"]["template"]
    template.write_text(
        template.read_text().replace("<!-- study: against last5 ε -->", "<!-- study: against last5 κ -->")
    )
    monkeypatch.chdir(tmp_path)
    assert fedpfn(["study", "page", "--stored", study]) == 2
    err = capsys.readouterr().err
    assert (
        err.count("\n") == 1
        and "unknown marker '<!-- study: against last5 κ -->'" in err
        and "against Y X" in err
    )
    assert not (tmp_path / "docs/guide/privacy-results.md").exists()
