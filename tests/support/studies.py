"""A declared study copied into a test's own folder, so its runs and pages go there."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from fedpfn.study.spec import Spec, load

ROOT = Path(__file__).parents[2]


def copied_study(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, study: str, *read: str) -> Spec:
    """`study` and the files it reads (its template, ...) copied from the checkout into tmp_path,
    which becomes the working folder; the study loaded from there."""
    monkeypatch.chdir(tmp_path)
    for name in (study, *read):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / name, tmp_path / name)
    return load(study)
