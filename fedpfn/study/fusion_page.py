"""docs/fusion.md from a model-soup run and a ColD fusion study: for each, the question, the setting,
the arms with the control, the results with intervals and the commands, all from the runs' soup.json
and cold.json (fedpfn.analysis.soup_report, fedpfn.analysis.cold_report).

    python scripts/fusion_page.py runs/soup-vit_tiny28-fmnist   # keeps a copy in docs/fusion/soup.json
    python scripts/fusion_page.py --cold runs/cold-cnn-fmnist   # keeps a copy in docs/fusion/cold.json
    python scripts/fusion_page.py --stored                       # the page again from those copies alone

Whatever is not given comes from its stored copy.
"""

from __future__ import annotations

import json
import shlex
import sys
from dataclasses import asdict
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from fedpfn.analysis import cold_report, soup_report
from fedpfn.analysis.pretrain import PretrainConfig
from fedpfn.analysis.soup import SoupConfig
from fedpfn.core.files import MAX_JSON_BYTES, DamagedFile, atomic_write_bytes, read_json
from fedpfn.core.flags import OneLineParser
from fedpfn.core.provenance import KEY, machine_of, machines_sentence

ROOT = Path(__file__).resolve().parents[2]  # the checkout: the page and its stored results live in its docs/

PAGE = ROOT / "docs" / "fusion.md"
STORED = {"soup": ROOT / "docs" / "fusion" / "soup.json", "cold": ROOT / "docs" / "fusion" / "cold.json"}

INTRO = """# Fusion of fine-tuned models: model soups and ColD fusion with shared anchors

Written by `python scripts/fusion_page.py` from a soup run and a ColD fusion study (kept in
`docs/fusion/soup.json` and `docs/fusion/cold.json`; `--stored` writes the page from them alone).
Do not edit by hand.

## Model soups

**Question.** Do fine-tunes of one pretrained start that share one anchor mask (TNA-PFN: a random
40 % of the weights fixed at the start's values) soup better than plain fine-tunes, and is any gain
from sharing the anchors rather than from freezing as much (the control: each fine-tune its own mask
at the same ratio)? Soups follow Wortsman et al. 2022: the uniform soup averages every ingredient;
the greedy soup adds ingredients in order of held-out accuracy and keeps each only if the held-out
accuracy does not fall. Everything is selected on a held-out split and reported on the test set.

**Reading.** This run is small ({seeds} seeds of K = {ingredients} short fine-tunes of the {model} on
{samples} training samples), so its ingredients are uneven and it does not yet test the paper's claim;
the intervals below say what it excludes.

### Results

{results}
Machine: {machine}.

### Commands

Read from the stored results (every setting is in the `config` of `docs/fusion/soup.json`):

```
{commands}
```
"""


COLD = """
## ColD fusion

**Question.** ColD fusion (Don-Yehiya et al. 2023) improves a pretrained model by collaborative
descent: contributors fine-tune the shared body on their own tasks with their own heads, the bodies
are averaged, and the average is everyone's next start; it is judged by the fused body on the
contributors' tasks and after fine-tuning a fresh head on tasks no contributor trained. Here the
contributors are clients (`--partition tasks`, `--personal 'classifier.*'`: configs/cold_fusion.toml).
Does sharing one anchor mask each round (FedPFN) fuse a better body than plain averaging, and is
any gain from sharing the anchors rather than from freezing as much (the control: each contributor
its own mask at the same ratio)? The pretrained start, unfused, is the reference. The held-out
probes fit on images no contributor trained on; the start's own pretraining split (pretrain.json)
is drawn apart from the runs' and may include some of them.

**Reading.** This study is small ({seeds} seeds, {rounds} rounds of the {model}):
the lines under the tables say, comparison by comparison, what it resolves and, where it does not,
what its intervals exclude.

### Results

{results}
Machine: {machine}.

### Commands

```
{commands}
```
"""


def _flags(record: Mapping[str, Any], defaults: Mapping[str, Any]) -> str:
    """The flags that set `record`'s values where they differ from the defaults."""
    text = lambda v: ",".join(map(str, v)) if isinstance(v, list | tuple) else str(v)  # noqa: E731
    return " ".join(
        f"--{k.replace('_', '-')} {text(v)}" for k, v in record.items() if text(v) != text(defaults[k])
    )


def start_command(result: Mapping[str, Any]) -> str:
    """The command that made the result's start, from its recorded pretraining settings (or why not)."""
    start = Path(result["config"]["start"])
    if not result.get("start_record"):
        return f"# {start}: its pretraining settings were not recorded beside these results"
    return f"python -m fedpfn.analysis.pretrain {_flags(result['start_record'], asdict(PretrainConfig()))} --out {start.parent}"


def soup_commands(result: Mapping[str, Any]) -> list[str]:
    """The commands behind a soup.json: its recorded command line, or one rebuilt from its settings."""
    if "argv" in result:
        soup, out = shlex.join(result["argv"]), result["out"]
    else:  # written before soup.json kept its command line and folder
        soup, out = _flags(result["config"], asdict(SoupConfig())) + " --out DIR", "DIR"
    unknown = [] if "out" in result else ["# DIR: the folder was not recorded beside these results"]
    soup_line = f"python -m fedpfn.analysis.soup {soup}"
    return [start_command(result), soup_line, f"python scripts/fusion_page.py {out}", *unknown]


def soup_section(result: Mapping[str, Any]) -> str:
    """The soup part of the page, from a run's soup.json."""
    cfg = result["config"]
    results = soup_report.markdown(result).split("\n", 1)[1].lstrip()  # the run's title gives way to the page's
    return INTRO.format(
        seeds=len(result["arms"]["plain"]), ingredients=cfg["ingredients"], model=cfg["model"],
        samples=cfg["train_subset"] or "all the downstream", results=results,
        machine=machine_of(result.get(KEY)), commands="\n".join(soup_commands(result)),
    )  # fmt: skip


def cold_section(result: Mapping[str, Any]) -> str:
    """The ColD part of the page, from a study's cold.json."""
    cfg = result["config"]
    commands = [start_command(result), "python -m fedpfn.analysis.cold " + shlex.join(result["argv"])]
    commands.append(f"python scripts/fusion_page.py --cold {result['out']}")
    results = cold_report.markdown(result).split("\n", 1)[1].lstrip()
    seeds = len(result["arms"]["plain"])
    return COLD.format(seeds=seeds, rounds=cfg["rounds"], model=cfg["model"], results=results,
                       machine=machine_of(result.get(KEY)), commands="\n".join(commands))  # fmt: skip


def read(kind: str, run: Path | None) -> dict[str, Any]:
    """A run's result or, without a run, the stored copy; SystemExit with one line if it cannot be read."""
    source = STORED[kind] if run is None else run / f"{kind}.json"
    try:
        return read_json(source, MAX_JSON_BYTES)
    except (OSError, DamagedFile) as err:
        print(f"fusion_page.py: cannot read {source} ({err})", file=sys.stderr)
        raise SystemExit(2) from None


def keep(kind: str, run: Path | None, result: dict[str, Any]) -> None:
    """A run's result stored for the page, once every result given has been read."""
    if run is not None:
        STORED[kind].parent.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(STORED[kind], (json.dumps(result, indent=1) + "\n").encode())


def main(argv: list[str] | None = None) -> int:
    """The page from the runs given (their results kept for the page) or from the kept copies alone."""
    parser = OneLineParser(prog="fusion_page.py", description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("run", nargs="?", type=Path, help="a soup run folder (holding soup.json)")
    parser.add_argument("--cold", type=Path, metavar="DIR", help="a ColD study folder (holding cold.json)")
    parser.add_argument("--stored", action="store_true", help="write the page from docs/fusion/*.json alone")
    args = parser.parse_args(argv)
    if args.stored == (args.run is not None or args.cold is not None):
        parser.error("give a soup run folder and/or --cold DIR, or --stored alone")
    soup, cold = read("soup", args.run), read("cold", args.cold)  # both read before either is kept
    keep("soup", args.run, soup)
    keep("cold", args.cold, cold)
    mixed = machines_sentence([p for p in (soup.get(KEY), cold.get(KEY)) if p])  # unrecorded: said per section
    atomic_write_bytes(PAGE, (soup_section(soup) + cold_section(cold) + (f"\n{mixed}\n" if mixed else "")).encode())
    print(
        f"wrote {PAGE.relative_to(ROOT)} from {args.run or STORED['soup']} and {args.cold or STORED['cold']}"
    )
    return 0

