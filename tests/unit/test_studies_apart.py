"""The project's studies live beside their declarations (studies/<name>/), not in the library (issue
57 item 1): no module of fedpfn imports one, lazily or not, and fedpfn/study holds no module of a
study's name; a study's own readings reach the page only by the dotted path its file names."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def imported(path: Path) -> set[str]:
    """Every module `path` imports, at its top or inside a function."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.add(node.module)
    return found


def test_no_module_of_fedpfn_imports_a_study() -> None:
    found = {str(p.relative_to(ROOT)): sorted(m for m in imported(p) if m.split(".")[0] == "studies")
             for p in (ROOT / "fedpfn").rglob("*.py")}  # fmt: skip
    assert {path: mods for path, mods in found.items() if mods} == {}


def test_the_study_layer_holds_no_module_named_after_a_study() -> None:
    studies = {p.name for p in (ROOT / "studies").iterdir() if p.is_dir() and not p.name.startswith((".", "_"))}
    assert {"drift", "earlier", "alignment_gate", "alignment_pilot", "fusion", "findings"} <= studies
    named = {p.stem for p in (ROOT / "fedpfn" / "study").glob("*.py")}
    clashes = {m for m in named if any(m == s or m.startswith(s.split("_")[-1]) for s in studies)}
    assert clashes == set(), clashes
