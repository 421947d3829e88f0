"""A study page's figure marker (`<!-- study: figure NAME ... -->`, fedpfn.study.figures): the
families' comparisons drawn from the stored results, beside them, linked from the page; a
figure of families of two endpoints, or of a family the study lacks, is refused in one line."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

from fedpfn.cli.main import main as fedpfn

ROOT = Path(__file__).parents[2]
FILES = ("studies/alignment_main/alignment_main.toml", "studies/alignment_main/alignment_main.md", "docs/alignment/main.json")


def copy(tmp_path: Path) -> None:
    for path in FILES:
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / path, tmp_path / path)


def test_the_figure_is_drawn_from_the_stored_results_and_linked_from_the_page(tmp_path, monkeypatch, capsys):
    copy(tmp_path)
    monkeypatch.chdir(tmp_path)
    assert fedpfn(["study", "page", "--stored", "studies/alignment_main/alignment_main.toml"]) == 0
    page = (tmp_path / "docs/alignment_main.md").read_text()
    links = re.findall(r"!\[[^]]*\]\(([^)]+)\)", page)
    assert links == ["alignment/main-accuracy-sharing-step.png"]
    assert (tmp_path / "docs" / links[0]).read_bytes().startswith(b"\x89PNG")
    assert not list((tmp_path / "docs/alignment").glob("*.pdf"))  # only the PNG: a PDF carries its date


def test_a_figure_over_two_endpoints_or_an_unknown_family_is_refused_in_one_line(tmp_path, monkeypatch, capsys):
    copy(tmp_path)
    monkeypatch.chdir(tmp_path)
    template = tmp_path / "studies/alignment_main/alignment_main.md"
    text = template.read_text()
    for marker, said in (
        ("accuracy retained", "figure accuracy retained: its families read acc, r; one figure draws families of one endpoint"),
        ("accuracy nosuch", "unknown marker '<!-- study: figure accuracy nosuch -->'"),
    ):
        template.write_text(text.replace("<!-- study: figure accuracy sharing step -->", f"<!-- study: figure {marker} -->"))
        assert fedpfn(["study", "page", "--stored", "studies/alignment_main/alignment_main.toml"]) == 2
        out, err = capsys.readouterr()
        assert err.count("\n") == 1 and said in err, err
    assert (tmp_path / "docs/alignment_main.md").exists() is False  # nothing written on a refusal


def test_each_arms_endpoint_is_drawn_at_each_axes_point(tmp_path, monkeypatch, capsys):
    """The privacy study's arms (one seed each: drawn, and flagged as having no interval), its page's
    figure of accuracy against ε (tests/studies/test_against_figure.py) drawn per arm instead."""
    for path in ("studies/privacy/privacy.toml", "studies/privacy/privacy.md", "docs/study/privacy.json"):
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / path, tmp_path / path)
    template = tmp_path / "studies/privacy/privacy.md"
    template.write_text(template.read_text().replace("<!-- study: against last5 ε -->", "<!-- study: arms-figure last5 -->"))
    monkeypatch.chdir(tmp_path)
    assert fedpfn(["study", "page", "--stored", "studies/privacy/privacy.toml"]) == 0
    links = re.findall(r"!\[[^]]*\]\(([^)]+)\)", (tmp_path / "docs/guide/privacy-results.md").read_text())
    assert links == ["../study/privacy-arms-last5.png"]
    assert (tmp_path / "docs/guide" / links[0]).resolve().read_bytes().startswith(b"\x89PNG")


def test_the_fusion_page_draws_both_parts_alike_whichever_study_writes_it(tmp_path, monkeypatch, capsys):
    files = ("studies/fusion/soup.toml", "studies/fusion/cold.toml", "studies/fusion/fusion.md", "docs/fusion/soup.json",
             "docs/fusion/cold.json")  # fmt: skip
    for path in files:
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / path, tmp_path / path)
    monkeypatch.chdir(tmp_path)
    drawn = {}
    for study in ("soup", "cold"):
        assert fedpfn(["study", "page", "--stored", f"studies/fusion/{study}.toml", "--trust-code"]) == 0
        page = (tmp_path / "docs/fusion.md").read_text()
        drawn[study] = (page, {name: (tmp_path / "docs/fusion" / name).read_bytes() for name in ("soup.png", "cold.png")})
    assert re.findall(r"!\[[^]]*\]\(([^)]+)\)", drawn["soup"][0]) == ["fusion/soup.png", "fusion/cold.png"]
    assert drawn["soup"] == drawn["cold"]  # one page, the same figures, from either study
