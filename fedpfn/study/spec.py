"""A study as its TOML file declares it: arms, seeds, shared settings, endpoints, families, page.

Every key is checked here, before any run starts: an unknown key, a value of the wrong kind, a
family naming an endpoint or arm that is not declared is one line (StudyError, a ConfigError).
Flags are kept as users type them (`fedpfn run`'s); whether `fedpfn run` accepts them is checked
by fedpfn.study.cells, which builds every cell's config. Paths (and a page's own readings, by
dotted path) are found from the folder `fedpfn study` runs in, as every `--out` is.

An axis is a flag and its values (`lr = ["0.1", "0.03"]`: `--lr 0.1`), or named sets of flags where
one point sets several (`[axes.regime]` with `r24 = "--num-clients 100 --local-epochs 3"`; the cell
pattern's `{regime}` is the name). A study whose cells are of two kinds declares the second as a
part (`[parts.NAME]`): a small study of its own (command, shared flags, arms, axes, cell pattern;
the study's runs folder and seeds unless it gives its own) whose cells `status` and `run` take with
the study's, and its page's own readings may read (federated runs, and one lmc control a block). A
command in JOINT runs several seeds in one cell: a pattern without `{seed}` gives one cell per arm
and axes point that runs all the arm's seeds (`--seeds 0,1,2`); other commands run a seed a cell.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fedpfn.core.files import DamagedFile, parse_json
from fedpfn.core.settings import ConfigError, _preset_text
from fedpfn.study.fields import StudyError, flags_of, seeds_of, table_of, value_of
from fedpfn.study.limits import FORMAT_SPEC, MAX_DEPTH, shown, size_problem, too_deep
from fedpfn.study.places import MAX_STORED_BYTES, code_problem, place_problem, read_place

TOP = ("title", "runs", "cell", "seeds", "shared", "baseline", "arms", "labels", "axes", "endpoints", "families",
       "tune", "page", "command", "arm_seeds", "not_run", "parts")  # fmt: skip
PART_KEYS = ("command", "runs", "cell", "seeds", "shared", "arms", "labels", "axes", "arm_seeds", "not_run")
COMMANDS = ("run", "lmc", "soup")  # what a cell runs: `fedpfn run`, `python -m fedpfn.experiments.lmc` or `.soup` (fedpfn.study.commands)
JOINT = ("lmc",)  # commands whose one cell may run several seeds (a cell pattern without {seed})
ENDPOINT_KEYS = ("metric", "last", "statistic", "scale", "unit", "format", "absent")
STATISTICS = ("mean", "median")  # of an endpoint's window of rows
FAMILY_KEYS = ("endpoint", "arms", "baseline", "pairs", "heading", "margin")
TUNE_KEYS = ("flag", "values", "seed", "flags", "metric", "last", "floor", "cell", "borrow")
PAGE_KEYS = ("out", "stored", "template", "text", "readings", "evaluate", "changed_verdicts")
METRICS = ("test_accuracy", "test_loss", "val_accuracy", "val_loss", "train_loss")
METRIC_PREFIXES = ("align_", "fed_eval_", "dp_")  # the alignment, clients' own evaluation and privacy keys
MARK = "<!-- study: "  # a template's line `<!-- study: KIND [NAME] -->` is where a table goes


@dataclass(frozen=True)
class Endpoint:
    """The mean (or median) of `metric` over a run's last `last` rows that have it (1: the final
    one); a row whose value is a list (one per client of the round) counts as its mean."""

    name: str
    metric: str
    last: int
    scale: float
    unit: str
    statistic: str = "mean"
    format: str = ".2f"  # how the page writes it (a Python format spec)
    absent: str | None = None  # what the page says for a run without the metric (None: such a run is refused)


@dataclass(frozen=True)
class Family:
    """Paired comparisons arm − its baseline on one endpoint (at every axes point), Holm-adjusted
    together: one baseline for all (`arms`, `baseline`), or each arm its own (`pairs`, e.g. X+anchors
    − X for several X, one question's family)."""

    name: str
    endpoint: str
    arms: tuple[str, ...]
    baseline: str  # the baseline of all, or of the first pair
    heading: str
    margin: float | None = None  # an equivalence margin in the endpoint's unit, declared before the runs
    pairs: tuple[tuple[str, str], ...] = ()  # (arm, its baseline) for every comparison, in order


@dataclass(frozen=True)
class Tune:
    """A setting chosen per arm and axes point before the main runs: the value whose run scores best;
    an arm in `borrow` runs no tuning of its own and takes the value its lender's runs chose."""

    flag: str
    values: tuple[str, ...]
    seed: int
    flags: tuple[str, ...]
    metric: str
    last: int
    floor: float
    cell: str
    borrow: dict[str, str] = field(default_factory=dict)  # arm -> the arm whose chosen value it takes


@dataclass(frozen=True)
class Page:
    """[page]: out (the page), stored (its results, JSON), template or text, readings, evaluate, changed_verdicts."""
    out: Path
    stored: Path
    template: Path | None
    text: str | None
    readings: str | None  # the study's own readings (fedpfn.study.readings), as `package.module:NAME`
    evaluate: tuple[str, ...] = ()  # the readings' evaluation of the finished cells, as its flags (ColD's: `fedpfn cold`'s)
    changed_verdicts: bool = False  # published under the former rule: list the verdicts the one rule turned


@dataclass(frozen=True)
class Spec:
    """The whole declaration; `path` is the file it came from."""

    path: Path
    title: str
    runs: Path
    cell: str
    seeds: tuple[int, ...]
    shared: tuple[str, ...]
    baseline: str
    arms: dict[str, tuple[str, ...]]
    labels: dict[str, str]
    axes: dict[str, tuple[str, ...]]
    endpoints: dict[str, Endpoint]
    families: dict[str, Family]
    tune: Tune | None
    page: Page | None
    command: str = "run"
    arm_seeds: dict[str, tuple[int, ...]] = field(default_factory=dict)  # an arm's own seeds, where not `seeds`
    not_run: dict[str, str] = field(default_factory=dict)  # why an arm has no cells yet, said on its page
    axis_sets: dict[str, dict[str, tuple[str, ...]]] = field(default_factory=dict)  # a named axis value's flags
    parts: dict[str, Spec] = field(default_factory=dict)  # cells of another kind, run and shown with the study's

    @property
    def joint(self) -> bool:
        """Whether a cell runs all its arm's seeds together (a JOINT command, a pattern without {seed})."""
        return self.command in JOINT and "{seed}" not in self.cell

    def every(self) -> list[Spec]:
        """The study, then its parts: what `status` and `run` go through."""
        return [self, *self.parts.values()]

    def seeds_of(self, arm: str) -> tuple[int, ...]:
        return self.arm_seeds.get(arm, self.seeds)

    def refuse(self, message: str) -> StudyError:
        return StudyError(f"study: {self.path}: {message}")

    def stored_results(self) -> dict[str, Any]:
        """The page's stored results (a JSON object), what a page is written from; refused in one
        line if never written, or not a bounded regular file of a JSON object (fedpfn.study.places)."""
        assert self.page is not None
        try:
            data = parse_json(read_place(self.page.stored, "page.stored", MAX_STORED_BYTES), f"page.stored: {self.page.stored}")
        except FileNotFoundError:
            raise self.refuse(f"{self.page.stored} is missing: the page was never written from the runs (fedpfn study "
                              f"page {self.path}{' --trust-code' * bool(self.page.readings)}); nothing written") from None  # fmt: skip
        except DamagedFile as err:
            raise self.refuse(str(err)) from None
        if not isinstance(data, dict):
            raise self.refuse(f"page.stored: {self.page.stored} holds {type(data).__name__}, not the JSON object "
                              "a page is written from")  # fmt: skip
        return data


def _per_arm(data: dict[str, Any], key: str, arms: dict[str, Any], path: Path) -> dict[str, Any]:
    """`arm_seeds` (an arm's own seeds) or `not_run` (why an arm has no cells yet), by declared arm."""
    table = table_of(data.get(key, {}), key, tuple(arms), path) if key in data else {}
    if key == "arm_seeds":
        return {arm: seeds_of(value, path, f"arm_seeds.{arm}") for arm, value in table.items()}
    return {arm: value_of(value, str, f"not_run.{arm}", path, "a string saying why") for arm, value in table.items()}


def _command(data: dict[str, Any], path: Path) -> str:
    command = data.get("command", "run")
    if command not in COMMANDS:
        raise StudyError(f"study: {path}: command = {command!r} is not accepted (accepted: {', '.join(COMMANDS)})")
    return command


def _endpoint(name: str, value: Any, path: Path) -> Endpoint:
    table = table_of(value, f"endpoints.{name}", ENDPOINT_KEYS, path)
    metric = value_of(table.get("metric"), str, f"endpoints.{name}.metric", path, "a metrics.jsonl key")
    if metric not in METRICS and not metric.startswith(METRIC_PREFIXES):
        raise StudyError(f"study: {path}: endpoints.{name}.metric: unknown metric '{metric}' (accepted: "
                         f"{', '.join(METRICS)}, or a key starting with {' or '.join(METRIC_PREFIXES)})")  # fmt: skip
    last = value_of(table.get("last", 1), int, f"endpoints.{name}.last", path, "a whole number of rounds, 1 or more")
    if last < 1:
        raise StudyError(f"study: {path}: endpoints.{name}.last = {last} is not a whole number of rounds, 1 or more")
    statistic = table.get("statistic", "mean")
    if statistic not in STATISTICS:
        raise StudyError(f"study: {path}: endpoints.{name}.statistic = {statistic!r} is not accepted (accepted: "
                         f"{', '.join(STATISTICS)})")  # fmt: skip
    accuracy = metric.endswith("accuracy")
    scale = value_of(table.get("scale", 100.0 if accuracy else 1.0), (int, float), f"endpoints.{name}.scale", path, "a number")
    unit = value_of(table.get("unit", "points" if accuracy else ""), str, f"endpoints.{name}.unit", path, "a string")
    written = value_of(table.get("format", ".2f"), str, f"endpoints.{name}.format", path, "a format spec such as \".2f\"")
    try:
        if not FORMAT_SPEC.fullmatch(written):  # bounded first: format(1.0, ".999999999f") would fill the memory
            raise ValueError(written)
        format(1.0, written)
    except ValueError:
        raise StudyError(f"study: {path}: endpoints.{name}.format = {written!r} is not a number's format spec "
                         "(e.g. \".2f\", \".3g\", \"g\")") from None  # fmt: skip
    absent = value_of(table["absent"], str, f"endpoints.{name}.absent", path, "a string") if "absent" in table else None
    return Endpoint(name, metric, last, float(scale), unit, statistic, format=written, absent=absent)


def _family(name: str, value: Any, spec: dict[str, Any], path: Path) -> Family:
    table = table_of(value, f"families.{name}", FAMILY_KEYS, path)
    endpoint = table.get("endpoint")
    if endpoint not in spec["endpoints"]:
        raise StudyError(f"study: {path}: families.{name}.endpoint: unknown endpoint {endpoint!r} "
                         f"(declared: {', '.join(spec['endpoints']) or 'none'})")  # fmt: skip
    pairs, baseline = _pairs(name, table, spec, path)
    for arm in [baseline, *(a for pair in pairs for a in pair)]:
        if arm not in spec["arms"]:
            raise StudyError(f"study: {path}: families.{name}: unknown arm {arm!r} (declared: {', '.join(spec['arms'])})")
    against = baseline if len({base for _, base in pairs}) == 1 else "its own baseline"
    heading = value_of(table.get("heading", f"{name}: each arm against {against}"), str, f"families.{name}.heading",
                       path, "a string")  # fmt: skip
    margin = table.get("margin")
    if margin is not None and (isinstance(margin, bool) or not isinstance(margin, int | float) or not margin > 0):
        raise StudyError(f"study: {path}: families.{name}.margin = {margin!r}: give a positive number, in the "
                         "endpoint's unit (the interval inside ±margin says the difference is smaller)")  # fmt: skip
    arms = tuple(dict.fromkeys(arm for arm, _ in pairs))
    return Family(name, endpoint, arms, baseline, heading, None if margin is None else float(margin), pairs)


def _pairs(name: str, table: dict[str, Any], spec: dict[str, Any], path: Path) -> tuple[tuple[tuple[str, str], ...], str]:
    """(arm, its baseline) for each comparison (`pairs` as declared, or each of `arms`, every other arm
    by default, against `baseline`), and the baseline of all or of the first pair."""
    if "pairs" not in table:
        baseline = table.get("baseline", spec["baseline"])
        arms = value_of(table.get("arms", [a for a in spec["arms"] if a != baseline]), list, f"families.{name}.arms", path,
                        "a list of arm names")  # fmt: skip
        return tuple((arm, baseline) for arm in arms), baseline
    if "arms" in table or "baseline" in table:
        raise StudyError(f"study: {path}: families.{name}: give pairs ([arm, its baseline], ...), or arms and a baseline, not both")
    pairs = value_of(table["pairs"], list, f"families.{name}.pairs", path, "a list of [arm, its baseline] pairs")
    for n, pair in enumerate(pairs):
        if not (isinstance(pair, list) and len(pair) == 2 and all(isinstance(a, str) for a in pair) and pair[0] != pair[1]
                and pairs.index(pair) == n):  # fmt: skip
            raise StudyError(f"study: {path}: families.{name}.pairs[{n}] = {shown(pair)} is not [arm, another arm], "
                             "given once")  # fmt: skip
    if not pairs:
        raise StudyError(f"study: {path}: families.{name}.pairs is empty; give [arm, its baseline] for each comparison")
    return tuple((arm, base) for arm, base in pairs), pairs[0][1]


def _tune(value: Any, path: Path, arms: dict[str, Any], axes: dict[str, Any]) -> Tune:
    table = table_of(value, "tune", TUNE_KEYS, path)
    borrow = table_of(table.get("borrow", {}), "tune.borrow", tuple(arms), path)
    for arm, lender in borrow.items():
        if lender not in arms or lender in borrow:
            raise StudyError(f"study: {path}: tune.borrow.{arm} = {shown(lender)} is not an arm that tunes its own value "
                             f"(those that do: {', '.join(a for a in arms if a not in borrow)})")  # fmt: skip
    flag = value_of(table.get("flag"), str, "tune.flag", path, "a flag name such as \"--lr\"")
    values = value_of(table.get("values"), list, "tune.values", path, "a list of the flag's values")
    for n, value in enumerate(values):
        value_of(value, (str, int, float), f"tune.values[{n}]", path, "a flag's value (text or a number)")
    metric = value_of(table.get("metric", "val_accuracy"), str, "tune.metric", path, "a metrics.jsonl key")
    return Tune(flag, tuple(str(v) for v in values), value_of(table.get("seed", 0), int, "tune.seed", path, "a seed"),
                flags_of(table.get("flags", []), "tune.flags", path), metric,
                value_of(table.get("last", 1), int, "tune.last", path, "a whole number of rounds"),
                float(value_of(table.get("floor", 0.0), (int, float), "tune.floor", path, "a number")),
                value_of(table.get("cell", "/".join(["tune", *(f"{a}{{{a}}}" for a in axes), "{arm}", flag.lstrip("-") + "{value}"])),
                    str, "tune.cell", path, "a pattern"),
                dict(borrow))  # fmt: skip


def _place(value: Any, key: str, path: Path, suffix: str = "") -> Path:
    """A path the study file names (runs, the page's files): text, inside the folder the study runs in."""
    text = value_of(value, str, key, path, "a path (text)")
    if (problem := place_problem(text, key, suffix)) is not None:
        raise StudyError(f"study: {path}: {problem}")
    return Path(text)


def _page(value: Any, path: Path) -> Page:
    table = table_of(value, "page", PAGE_KEYS, path)
    text = lambda key: value_of(table.get(key), str, f"page.{key}", path, "a string") if key in table else None  # noqa: E731
    if ("template" in table) == ("text" in table):
        raise StudyError(f"study: {path}: page needs one of template (a markdown file) or text (the page itself)")
    if (key := next((k for k in ("out", "stored") if k not in table), None)) is not None:
        raise StudyError(f"study: {path}: page.{key} is missing (where the {key} file is written)")
    template = _place(table["template"], "page.template", path, ".md") if "template" in table else None
    if (problem := code_problem(text("readings"), "page.readings")) is not None:
        raise StudyError(f"study: {path}: {problem}")
    return Page(_place(table["out"], "page.out", path, ".md"), _place(table["stored"], "page.stored", path, ".json"), template,
                text("text"), text("readings"), flags_of(table.get("evaluate", []), "page.evaluate", path),
                value_of(table.get("changed_verdicts", False), bool, "page.changed_verdicts", path, "true or false"))  # fmt: skip


def _axes(value: Any, path: Path) -> tuple[dict[str, tuple[str, ...]], dict[str, dict[str, tuple[str, ...]]]]:
    """Each axis's values in order, and the flags of each value of a named axis (a table of flag sets)."""
    axes: dict[str, tuple[str, ...]] = {}
    sets: dict[str, dict[str, tuple[str, ...]]] = {}
    for axis, values in table_of(value, "axes", tuple(value) if isinstance(value, dict) else (), path).items():
        if isinstance(values, dict) and values:
            sets[axis] = {name: flags_of(flags, f"axes.{axis}.{name}", path) for name, flags in values.items()}
            axes[axis] = tuple(sets[axis])
        else:
            listed = value_of(values, list, f"axes.{axis}", path, "a list of the flag's values, or a table of named flag sets")
            axes[axis] = tuple(str(value_of(v, (str, int, float), f"axes.{axis}[{n}]", path, "a flag's value (text or a number)"))
                               for n, v in enumerate(listed))  # fmt: skip
    return axes, sets


def _parts(data: dict[str, Any], path: Path) -> dict[str, Spec]:
    """Each part: a study of its own, over the study's runs folder and seeds unless it declares others."""
    value = data.get("parts", {})
    found = {}
    for name, part in table_of(value, "parts", tuple(value) if isinstance(value, dict) else (), path).items():
        inherited = {"title": f"{data.get('title', path.stem)}: {name}", "runs": data.get("runs", f"runs/{path.stem}"),
                     "seeds": data.get("seeds", [0])}  # fmt: skip
        declared = table_of(part, f"parts.{name}", PART_KEYS, path)
        try:
            found[name] = parse(path, {**inherited, **declared})
        except StudyError as err:
            raise StudyError(str(err).replace(f"study: {path}: ", f"study: {path}: parts.{name}: ", 1)) from None
    return found


def parse(path: Path, data: dict[str, Any]) -> Spec:
    """The declaration's parts, each checked; StudyError on the first problem."""
    unknown = [k for k in data if k not in TOP]
    if unknown:
        raise StudyError(f"study: {path}: unknown key '{unknown[0]}' (accepted: {', '.join(TOP)})")
    arms = table_of(data.get("arms", {}), "arms", tuple(data.get("arms", {})), path)
    if len(arms) < 1:
        raise StudyError(f"study: {path}: [arms] is missing or empty; declare each arm's flags, e.g. fedavg = \"--algorithm fedavg\"")
    spec: dict[str, Any] = {"arms": {a: flags_of(f, f"arms.{a}", path) for a, f in arms.items()}}
    spec["baseline"] = data.get("baseline", next(iter(arms)))
    if spec["baseline"] not in arms:
        raise StudyError(f"study: {path}: baseline {spec['baseline']!r} is not an arm (declared: {', '.join(arms)})")
    labels = table_of(data.get("labels", {}), "labels", tuple(spec["arms"]), path)
    spec["labels"] = {a: value_of(labels.get(a, a), str, f"labels.{a}", path, "a string") for a in spec["arms"]}
    spec["axes"], axis_sets = _axes(data.get("axes", {}), path)
    endpoints = table_of(data.get("endpoints", {}), "endpoints", tuple(data.get("endpoints", {})), path)
    spec["endpoints"] = {name: _endpoint(name, value, path) for name, value in endpoints.items()}
    families = table_of(data.get("families", {}), "families", tuple(data.get("families", {})), path)
    default_cell = "/".join([*(f"{a}{{{a}}}" for a in spec["axes"]), "{arm}", "s{seed}"])
    return Spec(
        path=path, title=value_of(data.get("title", path.stem), str, "title", path, "a string"),
        runs=_place(data.get("runs", f"runs/{path.stem}"), "runs", path),
        cell=value_of(data.get("cell", default_cell), str, "cell", path, "a pattern"),
        seeds=seeds_of(data.get("seeds", [0]), path), shared=flags_of(data.get("shared", []), "shared", path),
        baseline=spec["baseline"], arms=spec["arms"], labels=spec["labels"], axes=spec["axes"], endpoints=spec["endpoints"],
        families={name: _family(name, value, spec, path) for name, value in families.items()},
        tune=_tune(data["tune"], path, spec["arms"], spec["axes"]) if "tune" in data else None,
        page=_page(data["page"], path) if "page" in data else None, command=_command(data, path),
        arm_seeds=_per_arm(data, "arm_seeds", arms, path), not_run=_per_arm(data, "not_run", arms, path),
        axis_sets=axis_sets, parts=_parts(data, path),
    )  # fmt: skip


def load(path: str | Path) -> Spec:
    """The study file, read with the presets' limits (a regular UTF-8 file, a page of text) and parsed."""
    path = Path(path)
    try:
        text = _preset_text(path)
    except ConfigError as err:
        raise StudyError(str(err).replace("config: ", "study: ", 1)) from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise StudyError(f"study: '{path}' is not valid TOML ({err})") from None
    except RecursionError:  # tables or arrays thousands of levels deep
        raise StudyError(f"study: {path}: nests tables or arrays deeper than Python reads; a study needs 4 levels") from None
    if (key := too_deep(data)) is not None:
        raise StudyError(f"study: {path}: {key.lstrip('.')} nests tables or arrays more than {MAX_DEPTH} levels deep")
    spec = parse(path, data)
    if (problem := size_problem(spec)) is not None:
        raise spec.refuse(problem)
    return spec

