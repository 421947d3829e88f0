#!/usr/bin/env python
"""docs/fusion.md from a model-soup run: the question, the setting, the arms with the control, the
results with intervals and the commands, all from the run's soup.json (fedpfn.analysis.soup_report).

    python scripts/fusion_page.py runs/soup-vit_tiny28-fmnist   # keeps a copy in docs/fusion/soup.json
    python scripts/fusion_page.py --stored                       # the page again from that copy alone
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from fedpfn.analysis.soup_report import markdown  # noqa: E402
from fedpfn.core.files import MAX_JSON_BYTES, DamagedFile, atomic_write_bytes, read_json  # noqa: E402
from fedpfn.core.settings import OneLineParser  # noqa: E402

PAGE = ROOT / "docs" / "fusion.md"
STORED = ROOT / "docs" / "fusion" / "soup.json"

INTRO = """# Fusion of fine-tuned models: model soups with shared anchors

Written by `python scripts/fusion_page.py` from a soup run (kept in `docs/fusion/soup.json`; `--stored`
writes the page from it alone). Do not edit by hand.

**Question.** Do fine-tunes of one pretrained start that share one anchor mask (TNA-PFN: a random
40 % of the weights fixed at the start's values) soup better than plain fine-tunes, and is any gain
from sharing the anchors rather than from freezing as much (the control: each fine-tune its own mask
at the same ratio)? Soups follow Wortsman et al. 2022: the uniform soup averages every ingredient;
the greedy soup adds ingredients in order of held-out accuracy and keeps each only if the held-out
accuracy does not fall. Everything is selected on a held-out split and reported on the test set.

**Reading.** This run is small (short fine-tunes on a few thousand samples of a 2-core machine), so
its ingredients are uneven and it does not yet test the paper's claim; the intervals below say what
it excludes. ColD fusion (collaborative descent over contributors with their own task heads) runs as
a federated preset, `configs/cold_fusion.toml` (`--personal 'classifier.*'`, `--partition tasks`);
its evaluation on held-out tasks with a fresh head is not built yet, so it has no results here.

## Results

{results}

## Commands

```
python -m fedpfn.analysis.pretrain --model vit_tiny28 --dataset fmnist --epochs 3 --out runs/pretrain-vit_tiny28-fmnist
python -m fedpfn.analysis.soup --start runs/pretrain-vit_tiny28-fmnist/model.safetensors --model vit_tiny28 \\
    --ingredients 4 --seeds 0,1,2 --train-subset 3000 --held-out 1000 --test-subset 1000 --points 3 \\
    --out runs/soup-vit_tiny28-fmnist
python scripts/fusion_page.py runs/soup-vit_tiny28-fmnist
```
"""


def main(argv: list[str] | None = None) -> int:
    parser = OneLineParser(prog="fusion_page.py", description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("run", nargs="?", type=Path, help="a soup run folder (holding soup.json)")
    parser.add_argument("--stored", action="store_true", help="write the page from docs/fusion/soup.json")
    args = parser.parse_args(argv)
    if args.stored == (args.run is not None):
        parser.error("give a soup run folder, or --stored (not both)")
    source = STORED if args.stored else args.run / "soup.json"
    try:
        result = read_json(source, MAX_JSON_BYTES)
    except (OSError, DamagedFile) as err:
        print(f"fusion_page.py: cannot read {source} ({err})", file=sys.stderr)
        return 2
    if not args.stored:
        STORED.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(STORED, (json.dumps(result, indent=1) + "\n").encode())
    results = markdown(result).split("\n", 1)[1].lstrip()  # the run's own title gives way to the page's
    atomic_write_bytes(PAGE, INTRO.format(results=results).encode())
    print(f"wrote {PAGE.relative_to(ROOT)} from {source}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
