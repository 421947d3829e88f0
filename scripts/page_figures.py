#!/usr/bin/env python
"""Every figure the README and the getting-started pages print: the command the pages name; the
code is fedpfn.study.page_figures (`python scripts/page_figures.py --help`)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from fedpfn.study.page_figures import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
