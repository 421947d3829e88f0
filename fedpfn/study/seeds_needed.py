"""`fedpfn seeds-needed`: how many seeds a difference needs, said before running, from an earlier
comparison's or study's spread (the arithmetic is fedpfn.analysis.plan's).

    fedpfn seeds-needed runs/cmp --difference 1           # an earlier `fedpfn compare` (comparison.json)
    fedpfn seeds-needed runs/cmp/report.json --difference 1 --metric final
    fedpfn seeds-needed studies/attacks/attacks.toml --difference 5   # a study's declared families, from its stored results
"""

from __future__ import annotations

import sys
from pathlib import Path

from fedpfn.analysis.inference import Paired
from fedpfn.analysis.plan import from_report, plan_lines
from fedpfn.core.files import DamagedFile, read_json
from fedpfn.core.flags import OneLineParser
from fedpfn.core.settings import ConfigError
from fedpfn.study.page import family_rows
from fedpfn.study.spec import load


def from_study(path: Path) -> list[tuple[list[Paired], float, str]]:
    """A study's declared families from its stored results (the generic page's; a reading's own file is not read)."""
    spec = load(path)
    if spec.page is None or spec.page.readings is not None or not spec.page.stored.is_file():
        raise ConfigError(f"{path}: only a study with stored results in its page's own format can be planned from")
    if not spec.families:  # the privacy study's: its page says what one seed an arm allows
        raise ConfigError(f"{path}: declares no comparison ([families]) to plan from")
    stored = read_json(spec.page.stored)
    found = []
    for name, family in spec.families.items():
        end = spec.endpoints[family.endpoint]
        found.append((family_rows(spec, stored, name), end.scale, end.unit or "as measured"))
    return found


EARLIER = "a comparison folder, its comparison.json or report.json, or a study's TOML"


def main(argv: list[str] | None = None, prog: str = "fedpfn seeds-needed") -> int:
    parser = OneLineParser(prog=prog, description="How many seeds a difference needs (80 % power), from an earlier "
                           "comparison's or study's spread, before running.")  # fmt: skip
    parser.add_argument("earlier", help=EARLIER)
    parser.add_argument("--difference", type=float, required=True,
                        help="the true difference to detect, in the page's unit (accuracy: points)")  # fmt: skip
    parser.add_argument("--metric", default="lastk", help="a report's metric (default lastk; also final, equal_up)")
    args = parser.parse_args(argv)
    try:
        if not args.difference > 0:
            raise ConfigError(f"difference: {args.difference:g} is not above 0")
        path = Path(args.earlier)
        if not path.exists():
            raise ConfigError(f"{path}: no such file or folder; give {EARLIER}")
        found = from_study(path) if path.suffix == ".toml" else from_report(path, args.metric)
    except (ConfigError, DamagedFile, OSError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print("\n".join(plan_lines(found, args.difference)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
