"""A mistyped flag is named, with the flag meant, before anything else is said about a command line.

argparse checks required arguments before it looks at what it did not recognise, so
`fedpfn align --x` used to answer "the following arguments are required: --out", a line that
says nothing of `--x`. `FlagNamingParser` parses with the required arguments relaxed, names an
unknown flag first, then checks what is missing; `suggestion` is what `fedpfn run` says too.
"""

from __future__ import annotations

import argparse
import difflib
import re
from collections.abc import Iterable, Sequence
from typing import Any

NUMBER = re.compile(r"-\d+(\.\d*)?|-\.\d+")  # a negative number is a value, never a flag


def suggestion(word: str, choices: Iterable[str]) -> str:
    """'; did you mean --num-clients?' for --num_clients, --algo or --alhpa; '' if nothing is near."""
    options = list(choices)
    normal = word.replace("_", "-").lower()
    prefixed = [option for option in options if option.startswith(normal)]
    near = [normal] if normal in options else prefixed if len(prefixed) == 1 else []
    near = near or difflib.get_close_matches(normal, options, n=1, cutoff=0.75)
    return f"; did you mean {near[0]}?" if near else ""


def unknown_flags(tokens: Sequence[str], options: Iterable[str]) -> str | None:
    """'unknown flag --x; did you mean --y?' for the flags among `tokens` (what a parser did not
    recognise; the value after a flag is not one), or None."""
    flags = [t for t in tokens if t.startswith("-") and t != "-" and not NUMBER.fullmatch(t)]
    if not flags:
        return None
    if len(flags) > 1:
        return f"unknown flags {', '.join(flags)}"
    return f"unknown flag {flags[0]}{suggestion(flags[0].split('=')[0], options)}"


class FlagNamingParser(argparse.ArgumentParser):
    """argparse that names an unknown flag before it says a required argument is missing."""

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        required = [action for action in self._actions if action.required]
        for action in required:
            action.required = False
        try:
            known, extra = super().parse_known_args(args, namespace)
        finally:
            for action in required:
                action.required = True
        if (unknown := unknown_flags(extra, self._option_string_actions)) is not None:
            self.error(unknown)
        missing = [action for action in required if _absent(getattr(known, action.dest, None))]
        if missing:
            names = ", ".join(argparse._get_action_name(action) or action.dest for action in missing)
            self.error(f"the following arguments are required: {names}")
        return known, extra


def _absent(value: Any) -> bool:
    return value is None or value == []
