"""A study page's figures: `<!-- study: figure NAME [NAME ...] -->` draws those families' paired
comparisons, a panel each; `<!-- study: arms-figure ENDPOINT -->` each arm's endpoint, a panel per
axes point; `<!-- study: against Y X -->` endpoint Y against endpoint X (accuracy against ε); a
page reading with sections of its own draws its figure with `reading_figure`.

Each comparison is drawn as the reports draw theirs (fedpfn.analysis.plots.paired_figure): every
seed's difference as a dot, the mean, and its 95 % t interval, in the endpoint's unit, an interval
of zero width or none flagged where it is drawn. The figure is written beside the page's stored
results (`page.stored`'s folder, named STEM-NAME[-NAME...].png) from the same numbers as the family's table,
so `fedpfn study page --stored` draws it again from them alone. Only the PNG is written: a PDF
carries its creation date, and the page should not change when nothing did.
"""

from __future__ import annotations

import os
import unicodedata
from collections.abc import Mapping, Sequence
from typing import Any

from matplotlib.figure import Figure

from fedpfn.analysis.inference import Paired, paired
from fedpfn.analysis.markup import image
from fedpfn.analysis.plots import ArmPoint, PairedSeries, against_figure, paired_figure
from fedpfn.analysis.plots.style import figure_files
from fedpfn.analysis.render import series_of
from fedpfn.core.files import atomic_write_bytes
from fedpfn.study.spec import Spec


def families_figure(spec: Spec, names: Sequence[str], rows: Mapping[str, Sequence[Paired]]) -> list[str]:
    """The families' figure (a panel each, one x axis: give families of one endpoint), written; the
    page's line that shows it (a path relative to the page)."""
    ends = {spec.families[name].endpoint for name in names}
    if len(ends) > 1:
        raise spec.refuse(f"figure {' '.join(names)}: its families read {', '.join(sorted(ends))}; "
                          "one figure draws families of one endpoint")  # fmt: skip
    end = spec.endpoints[ends.pop()]
    unit = end.unit or "as measured"
    panels = {spec.families[name].heading: [series_of(row, end.scale) for row in rows[name]] for name in names}
    baselines = list(dict.fromkeys(spec.labels[base] for name in names for _, base in spec.families[name].pairs))
    baseline = baselines[0] if len(baselines) == 1 else "its baseline"
    title = f"{spec.title}: each arm − {baseline} on the same seed"
    link = written(spec, "-".join(names), paired_figure(panels, baseline, title, unit, name=str))  # labels are words
    return [image(f"{title}: each seed's difference, the mean and its 95 % interval", link)]


def arms_figure(spec: Spec, endpoint: str, points: Mapping[str, Sequence[Mapping[str, Any]]]) -> list[str]:
    """Each arm's `endpoint` at each axes point (`points`: the stored cells by point), every seed a
    dot, with the mean and its 95 % t interval (none from one seed), written; the page's line."""
    end = spec.endpoints[endpoint]
    panels = {}
    for point, cells in points.items():
        rows = []
        for arm in spec.arms:
            values = {c["seed"]: c["endpoints"][endpoint] for c in cells if c["arm"] == arm}
            found = {seed: v for seed, v in values.items() if v is not None}
            if found:
                rows.append(series_of(paired(spec.labels[arm], endpoint, found, dict.fromkeys(found, 0.0)), end.scale))
        panels[point or endpoint] = rows
    title = f"{spec.title}: {endpoint} of each arm"
    return [reading_figure(spec, f"arms-{endpoint}", panels, title, end.unit or "as measured", endpoint, mean_name="mean")]


def against(spec: Spec, y: str, x: str, points: Mapping[str, Sequence[Mapping[str, Any]]]) -> list[str]:
    """Endpoint `y` against endpoint `x` (accuracy against ε), a line per axes point through its
    arms, every seed a dot, written as STEM-Y-against-X.png; the page's line that shows it."""
    ends = spec.endpoints[y], spec.endpoints[x]
    lines = {}
    for point, cells in points.items():
        arms = []
        for arm in spec.arms:
            pairs = [(c["endpoints"][x], c["endpoints"][y]) for c in cells if c["arm"] == arm and c["endpoints"][y] is not None]
            arms.append(ArmPoint(spec.labels[arm], [(None if vx is None else vx * ends[1].scale, vy * ends[0].scale)
                                                    for vx, vy in pairs]))  # fmt: skip
        lines[point or y] = [a for a in arms if a.seeds]
    title = f"{spec.title}: {y} against {x}"
    axis = [f"{n}" + (f", {e.unit}" if e.unit else "") for n, e in ((y, ends[0]), (x, ends[1]))]
    fig = against_figure(lines, title, (axis[0], axis[1]), x)
    link = written(spec, f"{file_part(y)}-against-{file_part(x)}", fig)
    return [image(f"{title}: each seed, and a line through each axes point's arms", link)]


def file_part(name: str) -> str:
    """An endpoint's name as a plain file name's part: a Greek letter by its name ('ε' -> 'epsilon')."""
    return "".join(c if c.isascii() else unicodedata.name(c, f"u{ord(c):x}").split()[-1].lower() for c in name)


def reading_figure(spec: Spec, name: str, panels: Mapping[str, Sequence[PairedSeries]], title: str, unit: str,
                   xlabel: str, **options: Any) -> str:  # fmt: skip
    """A page reading's own figure (its panels of comparisons, each row's label in words; `options`:
    paired_figure's `linear_within`, `mean_name`), written beside the stored results as
    STEM-NAME.png; the page's line that shows it."""
    fig = paired_figure(panels, "", title, unit, name=str, xlabel=xlabel, **options)
    return image(f"{title}: each seed, the mean and its 95 % interval", written(spec, name, fig))


def written(spec: Spec, name: str, fig: Figure, file: str | None = None) -> str:
    """The figure as STEM-NAME.png (or `file`, for a page two studies write alike) beside the page's
    stored results; its path from the page."""
    assert spec.page is not None  # a page is being written
    path = spec.page.stored.with_name(file or f"{spec.page.stored.stem}-{name}.png")
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(path, figure_files(fig)["png"])
    return os.path.relpath(path, spec.page.out.parent).replace(os.sep, "/")
