#!/usr/bin/env python
"""Write SuperNodes' own training partitions, so that each node holds only its own data.

The same command as `fedpfn partition` (`fedpfn.cli.partition`, where its documentation is):

  python scripts/export_partition.py --config runs/x/config.json --to 0=node-0/part --to 1=node-1/part
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fedpfn.cli.partition import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
