"""A mistyped flag is named, with the flag meant, before anything else is said about a command line.

argparse checks required arguments before it looks at what it did not recognise, so
`fedpfn align --x` used to answer "the following arguments are required: --out", a line that
says nothing of `--x`. `OneLineParser` parses with the required arguments relaxed, names an
unknown flag first, then checks what is missing; `suggestion` is what `fedpfn run` says too.
It is the one parser of every command but `fedpfn run` (whose mistakes join its settings' problems).
"""

from __future__ import annotations

import argparse
import difflib
import re
import sys
from collections.abc import Iterable, Sequence
from typing import Any, NoReturn

NUMBER = re.compile(r"-\d+(\.\d*)?|-\.\d+")  # a negative number is a value, never a flag
SCRIPT_REFUSAL = "{prog}: {message} (--help lists what is accepted)\n"
ANALYSIS_REFUSAL = "error: {message} ({prog} --help lists every flag)\n"  # worded as `fedpfn run` words it


def fail(message: str, code: int = 2) -> int:
    """One `error:` line per problem; exit 2 for input refused (130: a user's code interrupted
    itself), 1 for a run that failed. Here, not in fedpfn.cli.simulate, so a command refuses before
    it imports what a run needs."""
    for line in message.splitlines():
        print(f"error: {line}", file=sys.stderr)
    return code


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


class _Missing(Exception):
    """argparse found a required argument missing; the flags it did not know are to be named first."""


class OneLineParser(argparse.ArgumentParser):
    """argparse whose mistakes are one line on stderr naming the value (an unknown flag first, before
    a missing required argument), exit 2, never the usage dump.

    `refusal_format` words that line from `{prog}` and `{message}`: a script's wording by default,
    `ANALYSIS_REFUSAL` for the analysis commands.
    """

    _deferring = False

    def __init__(self, *args: Any, refusal_format: str = SCRIPT_REFUSAL, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.refusal_format = refusal_format

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        try:
            self._deferring = True  # --help is answered in this pass, with the usage as declared
            known, extra = super().parse_known_args(args, namespace)
        except _Missing as missing:
            extra = self._relaxed(args, namespace)  # only to learn what was not recognised
            self._deferring = False
            self.error(unknown_flags(extra, self._option_string_actions) or str(missing))
        finally:
            self._deferring = False
        if (unknown := unknown_flags(extra, self._option_string_actions)) is not None:
            self.error(unknown)
        return known, extra

    def _relaxed(self, args: Sequence[str] | None, namespace: argparse.Namespace | None) -> list[str]:
        """What a parse with no argument required leaves unrecognised."""
        required = [action for action in self._actions if action.required]
        try:
            for action in required:
                action.required = False
            return super().parse_known_args(args, namespace)[1]
        finally:
            for action in required:
                action.required = True

    def error(self, message: str) -> NoReturn:
        if self._deferring and message.startswith("the following arguments are required"):
            raise _Missing(message)
        self.exit(2, self.refusal(message))

    def refusal(self, message: str) -> str:
        """The one line a refusal prints on stderr."""
        return self.refusal_format.format(prog=self.prog, message=message)
