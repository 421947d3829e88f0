"""Assertions shared by several modules: a result's provenance, a figure's PNG and PDF."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import torch
from PIL import Image

from fedpfn.analysis.plots import COLUMN_WIDTH, DPI
from fedpfn.core import provenance

KEYS = {"git", "python", "packages", "device"}
LIBRARIES = {"torch", "numpy", "scipy", "flwr"}
MACHINE = {"cpu", "cpus", "torch_threads", "gpus"}


def assert_provenance(found: Any) -> None:
    """`found` is a provenance of this process: commit, library versions, CPU model and threads."""
    assert isinstance(found, dict) and KEYS <= set(found), found
    assert LIBRARIES <= set(found["packages"]) and all(found["packages"][name] for name in LIBRARIES)
    assert MACHINE <= set(found["device"]) and found["device"]["cpus"] >= 1
    assert found["device"]["torch_threads"] == torch.get_num_threads()
    assert found["device"]["cpu"] == provenance.cpu_model()
    if found["git"] is not None:
        assert re.fullmatch(r"[0-9a-f]{40}", found["git"]["commit"])


def assert_png_and_pdf(png: Path) -> Path:
    """The PNG is a column wide; the PDF beside it is a PDF. Returns the PDF's path."""
    pdf = png.with_suffix(".pdf")
    assert pdf.read_bytes().startswith(b"%PDF")
    with Image.open(png) as image:
        assert image.width == round(COLUMN_WIDTH * DPI)
    return pdf
