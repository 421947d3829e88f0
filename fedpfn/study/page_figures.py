"""Every figure the README and the getting-started pages print, from one place.

    python scripts/page_figures.py measure quickstart   # the first result: 2 rounds, seconds (+ seeds 0-4)
    python scripts/page_figures.py measure default      # make run's experiment: 20 rounds of the CNN, minutes
    python scripts/page_figures.py write                # the pages' sentences from the stored figures
    python scripts/page_figures.py check                # exit 1 where a page says other than the figures

`measure` runs the pages' own commands (`fedpfn run ...`) in a temporary folder, as a reader
would, and stores what they printed and wrote in docs/getting-started/figures.json: the
accuracy, the time from launch to exit with the load average beside it, the files of the run
folder, the machine. `write` puts each figure into its sentence on the pages (README.md,
first-run.md, run-folder.md's file table); `check` is what tests/studies/test_page_figures.py runs, with
a fresh quickstart whose accuracy must be the stored one on this CPU (the runs are
deterministic) and within the stored spread elsewhere. The test suite's own figures (tests,
minutes) are stored from the testing page's measurement (`make test`), which this module does
not rerun.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import time
from datetime import date
from pathlib import Path

from fedpfn.core.files import CLIENT_STATE, MODEL_ROUND, TENSORBOARD, WANDB, atomic_write_bytes, model_file
from fedpfn.core.flags import OneLineParser
from fedpfn.core.provenance import cpu_id, cpu_model

ROOT = Path(__file__).resolve().parents[2]  # the checkout: the pages and configs/ the commands read

FIGURES = ROOT / "docs" / "getting-started" / "figures.json"
COMMANDS = {
    "quickstart": ["fedpfn", "run", "--config", "configs/quickstart.toml"],
    "default": ["fedpfn", "run", "--config", "configs/fmnist_default.toml"],  # what `make run` runs (into runs/default)
}
SPREAD_SEEDS = (0, 1, 2, 3, 4)  # the quickstart's spread: the same command on these seeds


def machine() -> dict:
    """The CPU (its name and its kind: two 'AMD EPYC' may round differently), its cores and torch's
    version: what a stored figure holds only on the same machine."""
    import torch

    return {"cpu": cpu_model(), "cpu_id": cpu_id(), "cores": os.cpu_count(), "torch": torch.__version__}


def run_once(command: list[str], out: Path, *extra: str) -> dict:
    """The page's command as typed, into `out`: its accuracy per round, its time, its files."""
    installed = Path(sys.executable).parent / command[0]  # the venv's `fedpfn`, activated or not
    command = [str(installed), *command[1:]] if installed.is_file() else command
    load = os.getloadavg()[0]
    started = time.perf_counter()
    done = subprocess.run([*command, *extra, "--out", str(out)], cwd=ROOT, capture_output=True, text=True,
                          check=False, timeout=3600)  # fmt: skip
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"error: {' '.join(command)} failed:\n{done.stderr[-2000:]}")
    from fedpfn.core.files import METRICS

    rows = [json.loads(line) for line in (out / METRICS).read_text().splitlines()]
    return {
        "accuracy": [round(100 * row["test_accuracy"], 2) for row in rows],
        "seconds": round(seconds, 1),
        "load": round(load, 1),  # the 1-minute load average at the start, and at the end
        "load_end": round(os.getloadavg()[0], 1),
        "files": sorted(p.name + ("/" if p.is_dir() else "") for p in out.iterdir() if not p.name.startswith(".")),
    }


def measure(name: str) -> dict:
    """One measurement of a page's command, and for the quickstart the same command's spread over seeds."""
    command = COMMANDS[name]
    with tempfile.TemporaryDirectory(prefix="fedpfn-figures-") as folder:
        found = run_once(command, Path(folder) / "run")
        found |= {"command": " ".join(command), "measured": date.today().isoformat(), "machine": machine()}
        if name == "quickstart":
            finals = [run_once(command, Path(folder) / f"s{s}", "--seed", str(s))["accuracy"][-1] for s in SPREAD_SEEDS]
            found["seeds"] = dict(zip(map(str, SPREAD_SEEDS), finals))
    return found


def duration(seconds: float) -> str:
    """8 s, 3 min 27 s, 13 min 22 s: as the pages write a wall time."""
    seconds = round(seconds)
    return f"{seconds} s" if seconds < 60 else f"{seconds // 60} min {seconds % 60} s"


def load_text(found: dict) -> str:
    """'0.3', or '10.4 to 8.2' where the load moved during the run."""
    start, end = found["load"], found.get("load_end", found["load"])
    return f"{start:g}" if abs(end - start) < 0.5 else f"{start:g} to {end:g}"


def values(figures: dict) -> dict[str, str]:
    """The stored figures as the sentences spell them."""
    quick, default, suite = figures["quickstart"], figures["default"], figures["suite"]
    seeds = quick["seeds"]
    cpu = quick["machine"]["cpu"]
    return {
        "qs_acc": f"{quick['accuracy'][-1]:.2f}", "qs_rounds": str(len(quick["accuracy"])),
        "qs_time": duration(quick["seconds"]), "qs_load": load_text(quick),
        "qs_date": quick["measured"], "cores": str(quick["machine"]["cores"]), "cpu": cpu,
        "spread": f"{max(seeds.values()) - min(seeds.values()):.2f}",
        "seed_range": f"{min(seeds.values()):.2f} to {max(seeds.values()):.2f} %",
        "seeds": f"{min(map(int, seeds))}-{max(map(int, seeds))}",
        "def_acc": f"{default['accuracy'][-1]:.1f}", "def_rounds": str(len(default["accuracy"])),
        "def_time": duration(default["seconds"]), "def_load": load_text(default),
        "suite_tests": str(suite["passed"]), "suite_commands": str(suite["commands_listed"]),
        "suite_time": duration(suite["seconds"]), "unit_time": duration(suite["unit"]["seconds"]),
        "unit_load": load_text(suite["unit"]),
    }  # fmt: skip


RULE = ("Figures that depend on the machine were measured on one {cpu} with {cores} cores and no GPU, {qs_date}: "
        "the same machine and command give the same numbers in every run (the runs are deterministic); "
        "another CPU rounds its sums differently, so its figures may differ from the first round on, "
        "within the spread of the same command over seeds {seeds} ({seed_range} here)")  # fmt: skip
SENTENCES = {
    "README.md": [
        "a closing line naming the folder: {def_acc} % after {def_rounds} rounds, {def_time} at load average {def_load}.",
        "{suite_tests} tests ({suite_commands} documented commands listed as skipped, with why) in {suite_time} on {cores} idle cores",
        "`make test-fast` runs tests/unit alone: no Ray, no subprocess, no Flower runtime ({unit_time} at load average {unit_load})",
        "**{qs_acc} %** test accuracy after round {qs_rounds}, {qs_time} from launch to exit at load average {qs_load}.",
        RULE,
    ],
    "docs/getting-started/first-run.md": [
        "**{qs_acc} %** test accuracy after round {qs_rounds}, {qs_time} from launch to exit at load average {qs_load}.",
        "{def_acc} % test accuracy after {def_rounds} rounds, {def_time} for the run at load average {def_load} (the set-up",
        RULE,
    ],
}  # fmt: skip
FILE_TABLE = "docs/getting-started/run-folder.md"
ONLY_WHEN = {f"{name}/" for name in (CLIENT_STATE, TENSORBOARD, WANDB)}  # rows of runs with other settings (SCAFFOLD, trackers)


def pattern(template: str) -> re.Pattern:
    """The template with any text where its figures go: finds the sentence whatever it said before."""
    parts = [r"\s+".join(map(re.escape, part.split(" "))) for part in re.split(r"\{\w+\}", template)]
    slots = [r"[^*\n|]{1,40}"] * (len(parts) - 1)  # a page may wrap its words; a figure is short, on one line
    if slots and not parts[0]:  # a sentence that opens with a figure: one word, not the text before it
        slots[0] = r"[^\s*|]{1,40}"
    return re.compile("".join(part + slot for part, slot in zip(parts, [*slots, ""])))


def listed_files(text: str) -> set[str]:
    """The file names in the first column of run-folder.md's table of files."""
    table = text[text.index("## Files") :].split("\n\n")[1]
    return {name for row in table.splitlines()[2:] for name in re.findall(r"`([^`]+)`", row.split("|")[1])}


VERB_TABLE = "docs/analysis/reports.md"


def written_by_verbs() -> dict[str, set[str]]:
    """The files each verb that declares them writes, from the code that writes them."""
    from types import SimpleNamespace

    from fedpfn.analysis.render import report_names
    from fedpfn.core.files import COMPARISON_CONFIG
    from fedpfn.experiments import cold, lmc_render, pretrain, soup
    from fedpfn.runtime.nodedata import META, X, Y

    paired = SimpleNamespace(paired=True)  # a report with an arm to compare: every figure
    return {
        "compare": {*report_names(paired, "comparison"), COMPARISON_CONFIG},
        "report": set(report_names(paired, "report")),
        "align": set(lmc_render.OUTPUT_FILES), "soup": set(soup.OUTPUT_FILES), "cold": set(cold.OUTPUT_FILES),
        "pretrain": set(pretrain.OUTPUT_FILES), "partition": {META, X, Y},
    }  # fmt: skip


def verb_table_problems(root: Path = ROOT) -> list[str]:
    """The reports page's table of what each verb writes against the code's names (folders aside)."""
    text = (root / VERB_TABLE).read_text()
    table = text[text.index("## What each verb writes") :].split("\n\n")[1]
    found = []
    for verb, names in written_by_verbs().items():
        row = next((r for r in table.splitlines() if r.startswith(f"| `fedpfn {verb}")), None)
        listed = {n for n in re.findall(r"`([^`]+)`", row.split("|")[2]) if not n.endswith("/")} if row else set()
        if listed != names:
            found.append(f"{VERB_TABLE}: fedpfn {verb} writes {sorted(names)}, the page lists {sorted(listed)}")
    return found


def problems(figures: dict, root: Path = ROOT) -> list[str]:
    """Where a page says other than the stored figures: one line each."""
    spelt, found = values(figures), []
    for page, templates in SENTENCES.items():
        text = re.sub(r"\s*\n\s*", " ", (root / page).read_text())
        found += [f"{page} does not say: {t.format(**spelt)}" for t in templates if t.format(**spelt) not in text]
    last = model_file("<last>")  # in the table, the model after the last round stands for every round but 0
    written = {
        last if (m := MODEL_ROUND.fullmatch(name)) and int(m[1]) else name for name in figures["quickstart"]["files"]
    }
    listed = listed_files((root / FILE_TABLE).read_text())
    found += [f"{FILE_TABLE} does not list {name}, which the quickstart writes" for name in sorted(written - listed)]
    found += [f"{FILE_TABLE} lists {name}, which the quickstart does not write" for name in sorted(listed - written - ONLY_WHEN)]
    return found + verb_table_problems(root)


def write(figures: dict, root: Path = ROOT) -> list[str]:
    """Each sentence rewritten with the stored figures where the page has it; the pages changed."""
    spelt, changed = values(figures), []
    for page, templates in SENTENCES.items():
        path = root / page
        text = before = path.read_text()
        for template in templates:
            said = template.format(**spelt)
            if said not in re.sub(r"\s*\n\s*", " ", text):  # a sentence that says it already keeps its lines
                text = pattern(template).sub(lambda _, said=said: said, text, count=1)
        if text != before:
            atomic_write_bytes(path, text.encode())  # a page is replaced whole, never left half-written
            changed.append(page)
    return changed


def main(argv: list[str] | None = None) -> int:
    """Measure, write or check the pages' figures; 1 where a page says other than the stored ones."""
    parser = OneLineParser(prog="python scripts/page_figures.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("action", choices=("measure", "write", "check"))
    parser.add_argument("what", nargs="?", choices=tuple(COMMANDS), help="measure: which command")
    args = parser.parse_args(argv)
    figures = json.loads(FIGURES.read_text())
    if args.action == "measure":
        if args.what is None:
            parser.error("measure needs quickstart or default")
        figures[args.what] = measure(args.what)
        atomic_write_bytes(FIGURES, (json.dumps(figures, indent=2) + "\n").encode())
        print(f"{FIGURES.relative_to(ROOT)}: {args.what} {figures[args.what]['accuracy'][-1]} %")
    elif args.action == "write":
        print("rewritten: " + (", ".join(write(figures)) or "nothing (the pages say the stored figures)"))
    found = problems(figures)
    for line in found:
        print(f"error: {line}", file=sys.stderr)
    return 1 if found else 0

