#!/usr/bin/env python
"""docs/alignment.md from the alignment gate's cells; the page is fedpfn/study/gate_page.py's.

    python scripts/alignment_page.py            # gather runs/alignment/*/seed*/lmc.json, then write the page
    python scripts/alignment_page.py --stored   # write the page from docs/alignment/cells.json alone
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from fedpfn.study.gate_page import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
