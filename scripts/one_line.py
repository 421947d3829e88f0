"""argparse for the study scripts: a mistake is one line that names the value and what is
accepted, exit code 2, before anything is read or run; never the usage dump (`--help` has it)."""

from __future__ import annotations

import argparse
from typing import NoReturn


class Parser(argparse.ArgumentParser):
    """argparse.ArgumentParser whose errors are one line on stderr, exit 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {message} (--help lists what is accepted)\n")
