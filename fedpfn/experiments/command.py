"""What every analysis command shares: declared settings read with all their problems at once,
a refusal as one line each with exit 2, an output folder checked before any work, files
written whole.

The lmc, pretrain, soup and cold commands use these; a command declares its settings as a
dataclass of `fedpfn.core.settings.setting(...)` fields and names the files it writes, and its
`main` starts with `read_command_line`.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple, TypeVar

import torch

from fedpfn.core.data import DATASETS, find_data_problem
from fedpfn.core.files import atomic_write_bytes
from fedpfn.core.flags import ANALYSIS_REFUSAL, OneLineParser
from fedpfn.core.places import out_problem
from fedpfn.core.settings import ConfigError, add_flag, field_map, one_of, parse_values, problems, setting
from fedpfn.core.user_code import code_settings, name_code

C = TypeVar("C")


def build_parser(prog: str, doc: str | None, settings: type, writes: str) -> OneLineParser:
    """`--out DIR`, `--overwrite` and one flag per declared setting (defaults left unset), in the order
    `listed` gives, the settings a command inherits from a group it does not place (fedpfn.core.anchors'
    AnchorScope) last; a setting the command's WORDS words for itself is helped by those words."""
    description = (doc or "").split("\n\n")[0]
    parser = OneLineParser(
        prog=prog, description=description, argument_default=argparse.SUPPRESS, refusal_format=ANALYSIS_REFUSAL
    )
    parser.add_argument(
        "--out", metavar="DIR", required=True, help=f"folder for {writes}, created if missing (required)"
    )
    parser.add_argument("--overwrite", action="store_true", help=f"replace {writes} already in --out")
    groups = [base for base in settings.__mro__[1:] if dataclasses.is_dataclass(base)]
    placed = set(getattr(settings, "BEFORE", {}))
    last = {f.name for group in groups for f in dataclasses.fields(group)} - placed
    order = listed(settings)
    words: Mapping[str, str] = getattr(settings, "WORDS", {})
    for f in [f for f in order if f.name not in last] + [f for f in order if f.name in last]:
        add_flag(parser, f, words.get(f.name))
    return parser


def listed(settings: type) -> list[dataclasses.Field]:
    """A command's settings in the order its --help lists them and its result's `config` records them:
    as declared (a group's settings first), but each group setting the class's BEFORE names moved just
    before the command's own setting named there, where the command declared it before the groups."""
    before: Mapping[str, str] = getattr(settings, "BEFORE", {})
    fields = field_map(settings)
    order = [f for f in fields.values() if f.name not in before]
    for name, own in before.items():
        order.insert(next(i for i, f in enumerate(order) if f.name == own), fields[name])
    return order


def recorded(cfg: Any) -> dict[str, Any]:
    """The settings as a result file's `config` holds them, in `listed` order (so a result written
    before the groups reads the same, key for key)."""
    return {f.name: getattr(cfg, f.name) for f in listed(type(cfg))}


def read_settings(cls: Callable[..., C], values: Mapping[str, Any]) -> tuple[C, list[str]]:
    """The settings from loosely typed values, and every problem: unreadable text and failed checks.

    A value that cannot be read keeps its default, so every other value is still checked.
    """
    fields = field_map(cls)  # type: ignore[arg-type]
    parsed: dict[str, Any] = {}
    found: list[str] = []
    for key, value in values.items():
        try:
            parsed.update(parse_values(fields, {key: value}))
        except ConfigError as err:
            found.append(str(err))
    cfg = cls(**parsed)
    rank = {f.name: at for at, f in enumerate(listed(type(cfg)))}  # problems in the order --help lists them
    return cfg, found + sorted(problems(cfg), key=lambda line: rank.get(line.split(":", 1)[0], len(rank)))


class CommandLine(NamedTuple):
    """A command line read whole: its settings, --out, the settings given as flags, and every
    problem found so far (unreadable or failed settings, an output folder that cannot take the files)."""

    cfg: Any
    out: Path
    given: set[str]
    problems: list[str]


def read_command_line(
    parser: Parser, settings: type, files: Sequence[str], argv: Sequence[str] | None
) -> CommandLine:
    """The shared start of an analysis command's `main`: parse, read the settings, check `--out`. A
    model or dataset of the user's own (`--model package.module:build`) is named by this command
    line, so fedpfn.core.user_code may import it."""
    args = vars(parser.parse_args(argv))
    name_code(*code_settings(args))
    out, overwrite = Path(args.pop("out")).expanduser(), bool(args.pop("overwrite", False))
    cfg, found = read_settings(settings, args)
    return CommandLine(cfg, out, set(args), found + output_problems(out, overwrite, files))


def not_yet_refused(found: Sequence[str], more: Sequence[str]) -> list[str]:
    """`more`'s `name: reason` lines about settings `found` does not already refuse: a value refused
    once (an unknown matcher) is not refused again for what it would have implied."""
    refused = {line.split(":", 1)[0] for line in found}
    return [line for line in more if line.split(":", 1)[0] not in refused]


DEVICES = ("auto", "cpu", "cuda")


@dataclasses.dataclass(frozen=True)
class MachineChoice:
    """Where an analysis command reads its data and computes (lmc, soup, pretrain): declared once, so
    each helps and refuses them the same way; `machine_problems` says what the machine lacks for them."""

    data_root: str | None = setting(None, "folder holding the dataset files (default: Debian's folder for fmnist)")
    device: str = setting("auto", "auto, cpu or cuda", one_of(DEVICES))


def machine_problems(dataset: str, data_root: str | None, device: str) -> list[str]:
    """What this machine lacks for the run: a built-in dataset's files (never downloaded by an analysis
    command) and the CUDA device asked for; found before any training starts."""
    found = []
    if device == "cuda" and not torch.cuda.is_available():
        found.append("device: cuda, but no CUDA device is available; use auto or cpu")
    if dataset in DATASETS and (problem := find_data_problem(dataset, data_root, False)):
        found.append(f"dataset: {problem}")
    return found


def output_problems(out: Path, overwrite: bool, files: Sequence[str]) -> list[str]:
    """Why `files` could not be written into the folder `out`, found before any work: the check
    every command's --out goes through (fedpfn.core.places), then the files already there."""
    if str(out) in ("", "."):
        return [f"out: give the folder to write {', '.join(files)} into"]
    if (problem := out_problem(out, ", ".join(files))) is not None:
        return [problem]
    earlier = [name for name in files if (out / name).exists() or (out / name).is_symlink()]
    if any(not (out / name).is_file() or (out / name).is_symlink() for name in earlier):
        return [f"out: {out} holds {', '.join(earlier)} that are not plain files; give another folder"]
    if earlier and not overwrite:
        advice = f"add --overwrite to replace {', '.join(files)} (nothing else in it is touched), or another folder"
        return [f"out: {out} already holds {', '.join(earlier)}; {advice}"]
    return []


def write_files(out: Path, contents: Mapping[str, bytes], draw: Callable[[Path], Any] | None = None) -> None:
    """Write each named file of `contents` whole into `out`, and every file `draw(staging)` made
    in a private folder first (figures): nothing is half-written if drawing fails."""
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="fedpfn-out-") as staging:
        if draw is not None:
            draw(Path(staging))
        for name, data in contents.items():
            atomic_write_bytes(out / name, data)
        for figure in sorted(Path(staging).iterdir()):
            atomic_write_bytes(out / figure.name, figure.read_bytes())


def fail(lines: Sequence[str]) -> int:
    """Every problem on its own line, exit status 2."""
    for line in lines:
        print(f"error: {line}", file=sys.stderr)
    return 2
