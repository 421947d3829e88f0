#!/usr/bin/env python
"""docs/fusion.md from a soup run and a ColD fusion study: the command the page names; the code is
fedpfn.study.fusion_page (`python scripts/fusion_page.py --help`)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from fedpfn.study.fusion_page import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
