#!/usr/bin/env python
"""docs/study/drift-<model>-page.json for a page written before drift_page.py kept its data.

    python scripts/drift_page_adopt.py 4f77cc0 [--model mlp]   # how the MLP study's was made

drift_page.py `--stored` writes the page from the reports' JSON and this file. Before it kept
the file, the only record of what it read from the runs besides the reports (the alignment
family, the observations' counts, the learning-rate grid) is the page it wrote: this reads
them back from that page as committed at COMMIT, as printed there (3 decimals; points, the loss
barrier in nats). Where a figure is not printed it is derived and the file says so: the std of
the fusion gap's differences from its 95 % CI; their per-seed values are not kept. Whether the
barriers were clamped is read off COMMIT's instrument (fedpfn/runtime/alignment.py): clamped
when it did not say where it measured.
"""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys

from drift_page import FIGURES, MODELS, SIGNED_MARK, page_data, shown
from drift_reading import ALIGNMENT, NAMES, scale_of
from drift_study import ALPHAS, ROOT, SEEDS
from scipy import stats

from fedpfn.core.settings import OneLineParser

ARM_OF = {name: arm for arm, name in NAMES.items()}
ROW = re.compile(r"^\| (α=\S+ \w+: FedPFN − [^|]+?) \| (\S+) \| \[(\S+), (\S+)\] \| (\S+) \| (\S+) \| (\d+) of (\d+) \| (.+) \|$")


def at_commit(commit: str, path: str) -> str:
    done = subprocess.run(["git", "show", f"{commit}:{path}"], cwd=ROOT, capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"drift_page_adopt: no {path} at commit {commit!r}")
    return done.stdout


def number(text: str) -> float | None:
    return None if text == "n/a" else float(text)


def alignment_row(match: re.Match[str]) -> dict:
    """One printed alignment comparison as drift_page.py's Paired fields (accuracy as a fraction)."""
    label, mean, low, high, p, holm, wins, n, said = match.groups()
    scale, n = scale_of(label)[0], int(n)
    mean, low, high = (float(v) / scale for v in (mean, low, high))
    same = said == "no test: every seed differs by the same amount"
    detectable = None if same else float(re.search(r"±(\S+)", said)[1]) / scale
    std = 0.0 if same else (high - low) / 2 / stats.t.ppf(0.975, n - 1) * math.sqrt(n)
    return {"label": label, "metric": "alignment", "seeds": list(SEEDS)[:n], "diffs": [mean] * n if same else [],
            "mean": mean, "std": std, "low": low, "high": high, "p_value": number(p), "mde": detectable,
            "wins": int(wins), "ties": n if same and mean == 0 else 0, "p_holm": number(holm)}  # fmt: skip


def observations(text: str) -> dict:
    zero = re.search(r"- The loss barrier was 0 in all (\d+) measurements", text)
    acc = re.search(r"accuracy barrier \(measured, not pre-registered\) averaged (\S+) points over its (\d+) "
                    r"measurements \(largest (\S+)\)", text)  # fmt: skip
    twins = re.findall(r"^- (.+?) and (.+?) gave the same test accuracy", text, re.M)
    return {
        "always_zero": {ALIGNMENT[0]: int(zero[1])} if zero else {},
        "acc_barrier": {"count": int(acc[2]), "mean": float(acc[1]) / 100, "max": float(acc[3]) / 100} if acc else None,
        "same_curves": [[ARM_OF[a], ARM_OF[b]] for a, b in twins],
    }


def grid(text: str) -> tuple[dict, dict]:
    """The learning-rate table: alpha -> arm -> lr -> score (None: collapsed), and the chosen rates."""
    lines = [line for line in text.split("### Learning rates")[1].split("###")[0].splitlines() if line.startswith("|")]
    lrs = re.findall(r"lr (\S+)", lines[0])
    scores: dict[str, dict] = {}
    chosen: dict[str, dict] = {}
    for line in lines[2:]:
        alpha, name, *cells, lr = (cell.strip() for cell in line.strip("|").split("|"))
        arm, alpha = ARM_OF[name], alpha.removeprefix("α=")
        scores.setdefault(alpha, {})[arm] = {r: None if c == "collapsed" else float(c) / 100 for r, c in zip(lrs, cells)}
        chosen.setdefault(alpha, {})[arm] = lr
    return scores, chosen


def adopt(commit: str, model: str) -> dict:
    text = at_commit(commit, "docs/results.md").split("## Results", 1)[1]
    rows = [m for line in text.split("### Alignment")[1].split("###")[0].splitlines() if (m := ROW.match(line))]
    scores, chosen = grid(text)
    return {
        "source": f"docs/results.md as committed at {commit}, which drift_page.py wrote from the runs under "
        f"runs/drift/{model} (not on this machine), read back by scripts/drift_page_adopt.py: figures as printed "
        "there; the fusion gap's std derived from its printed 95 % CI, its per-seed differences not kept",
        "alignment": [alignment_row(m) for m in rows],
        **observations(text),
        "clamped": SIGNED_MARK not in at_commit(commit, "fedpfn/runtime/alignment.py"),
        "grid": scores,
        "chosen": chosen,
    }


def cli(argv: list[str] | None = None) -> int:
    parser = OneLineParser(prog="drift_page_adopt.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("commit", help="the commit whose docs/results.md drift_page.py wrote from the runs")
    parser.add_argument("--model", default="mlp", choices=MODELS)
    args = parser.parse_args(argv)
    out = page_data(FIGURES, args.model)
    if out.exists():
        raise SystemExit(f"drift_page_adopt: {shown(out)} exists; it is drift_page.py's, kept as it is")
    data = adopt(args.commit, args.model)
    if len(data["alignment"]) != 2 * len(ALIGNMENT) * len(ALPHAS):
        raise SystemExit(f"drift_page_adopt: the page at {args.commit} has no alignment table of drift_page.py's form")
    out.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n")
    print(f"wrote {shown(out)}")
    return 0


if __name__ == "__main__":
    sys.exit(cli())
