"""Figures as a reviewer gets them, read back from the saved files: a PDF beside every PNG, a
column's width, the setting in the title, one colour per arm (issue 23).

The PDF is parsed by hand (no PDF library is a dependency): its Info /Title string, and the
stroke colours (`r g b RG`) of its Flate-compressed content streams.
"""

from __future__ import annotations

import re
import zlib
from pathlib import Path

import numpy as np
import pytest
from matplotlib.colors import to_rgb

from fedpfn.analysis.plots import (
    OKABE_ITO,
    PairedSeries,
    plot_comparison,
    plot_paired,
    plot_run,
)
from fedpfn.experiments import lmc_render
from partitions.report import partition_figure, plot_partition
from tests.support.checks import assert_png_and_pdf
from tests.support.figure_data import lmc_result, rows

SETTING = {"dataset": "fmnist", "model": "cnn", "num_clients": 20, "clients_per_round": 10, "partition": "dirichlet",
           "alpha": 0.1, "lr": 0.05, "server": "fedavgm", "algorithm": "fedpfn", "anchor_ratio": 0.4}  # fmt: skip
ARMS = ["fedavg", "fedpfn", "fedpnu", "fedpnu anchor_ratio=0.6", "scaffold"]
ESCAPES = {
    ord("n"): b"\n",
    ord("r"): b"\r",
    ord("t"): b"\t",
    ord("("): b"(",
    ord(")"): b")",
    ord("\\"): b"\\",
}


def pdf_title(path: Path) -> str:
    """The PDF's Info /Title: a literal string, UTF-16 with a byte-order mark when not ASCII."""
    data = path.read_bytes()
    i, raw = data.index(b"/Title (") + len(b"/Title ("), bytearray()
    while data[i] != ord(")"):
        if data[i] == ord("\\"):
            i += 1
            raw += ESCAPES.get(data[i], bytes([data[i]]))
        else:
            raw.append(data[i])
        i += 1
    return raw[2:].decode("utf-16-be") if raw.startswith(b"\xfe\xff") else raw.decode("latin-1")


def stroke_colours(path: Path) -> set[str]:
    """Every stroke colour the PDF's pages draw with (`r g b RG`, or `g G` for a grey), as #rrggbb."""
    found = set()
    for stream in re.findall(rb"stream\r?\n(.*?)\r?\nendstream", path.read_bytes(), re.S):
        try:
            text = zlib.decompress(stream)
        except zlib.error:
            continue
        colours = re.findall(rb"([\d.]+) ([\d.]+) ([\d.]+) RG", text)
        colours += [(grey, grey, grey) for grey in re.findall(rb"(?<![\d.])([\d.]+) G\b", text)]
        found |= {"#" + "".join(f"{round(255 * float(c)):02x}" for c in rgb) for rgb in colours}
    return found


def test_a_runs_figure_names_its_settings_in_the_saved_pdf(tmp_path):
    written = plot_run(rows(0), tmp_path / "accuracy.png", "fedpfn · seed 0", SETTING)
    assert written == [tmp_path / "accuracy.png", tmp_path / "accuracy.pdf"]
    title = pdf_title(assert_png_and_pdf(tmp_path / "accuracy.png"))
    for part in ("Dirichlet α=0.1", "lr 0.05", "server FedAvgM", "ρ=0.4"):
        assert part in title, (part, title)


def test_a_comparison_draws_each_arm_in_its_own_colour_in_the_saved_pdf(tmp_path):
    title = "fmnist cnn · 20 clients, 10 a round · Dirichlet α=0.1 · 5 rounds · seeds 0, 1, 2"
    plot_comparison(
        {arm: [rows(seed) for seed in range(3)] for arm in ARMS}, tmp_path / "comparison.png", title
    )
    pdf = assert_png_and_pdf(tmp_path / "comparison.png")
    assert pdf_title(pdf) == title
    arm_colours = {
        "#" + "".join(f"{round(255 * c):02x}" for c in to_rgb(colour)) for colour in OKABE_ITO[: len(ARMS)]
    }
    assert arm_colours <= stroke_colours(pdf)  # five arms, five colours, all drawn


def test_paired_differences_are_saved_beside_their_pdf(tmp_path):
    series = [PairedSeries(arm, [0.5, -0.2, 1.0], 0.43, -0.4, 1.3) for arm in ARMS[1:]]
    plot_paired(
        {"final round": series}, "fedavg", tmp_path / "paired_differences.png", "Dirichlet α=0.1 · seeds 0-2"
    )
    assert "Dirichlet α=0.1" in pdf_title(assert_png_and_pdf(tmp_path / "paired_differences.png"))


def test_a_partition_is_drawn_with_class_names_and_its_alpha(tmp_path):
    counts = np.random.default_rng(0).integers(0, 40, size=(20, 10))
    names = [
        "T-shirt/top",
        "Trouser",
        "Pullover",
        "Dress",
        "Coat",
        "Sandal",
        "Shirt",
        "Sneaker",
        "Bag",
        "Ankle boot",
    ]
    plot_partition(tmp_path / "partition.png", counts, names, "Dirichlet α=0.5 · seed 0")
    assert "Dirichlet α=0.5" in pdf_title(assert_png_and_pdf(tmp_path / "partition.png"))
    fig = partition_figure(counts, names)
    assert [t.get_text() for t in fig.legends[0].get_texts()] == names
    with pytest.raises(ValueError, match="class_names has 2 names for 10 classes"):
        partition_figure(counts, names[:2])


def test_lmc_curves_show_each_arm_before_and_after_matching(tmp_path):
    written = lmc_render.plot_curves(lmc_result(), tmp_path / "lmc.png")
    assert written == [tmp_path / "lmc.png", tmp_path / "lmc.pdf"]
    title = pdf_title(assert_png_and_pdf(tmp_path / "lmc.png"))
    assert "Dirichlet(0.5)" in title and "lr 0.05" in title and "from init" in title
    assert {"#000000", "#e69f00"} <= stroke_colours(tmp_path / "lmc.pdf")  # plain black, anchored orange
