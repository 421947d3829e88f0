"""mkdocs hook: a link from a docs page to a file beside docs/ (the generated
results_earlier.md links `../benchmarks/README.md`) becomes that file's path in code, since
the site holds docs/ only. Every link inside docs/ stays for the strict build to check, and
the generated pages are never edited for the site. Then every code span that names a file or
folder of the checkout (`clients/fedlc.py`, `strategies/`) links to it at mkdocs.yml's
`repo_url`, outside fenced blocks and existing links."""

from __future__ import annotations

import posixpath
import re
from pathlib import Path

LINK = re.compile(r"\[([^\]]+)\]\(([^)#\s:]+)\)")
ROOT = Path(__file__).resolve().parents[1]
CODE_SPAN = re.compile(r"(?<![\[`])`([A-Za-z_.][\w./-]*)`(?![`\]])")  # `path`, not [`path`](...) or ``x``
FENCE = re.compile(r"^\s*```")


def on_page_markdown(markdown: str, page, config, files) -> str:
    """`[text](../path)` leaving docs/ -> `text` (`path`), the path from the repository root."""
    folder = posixpath.dirname(page.file.src_uri)

    def outside_as_path(match: re.Match) -> str:
        text, target = match[1], match[2]
        resolved = posixpath.normpath(posixpath.join("docs", folder, target))
        if resolved.startswith("docs/"):
            return match[0]
        return f"`{resolved}`" if text.strip("`") == resolved else f"{text} (`{resolved}`)"

    return break_long_names(link_code_references(LINK.sub(outside_as_path, markdown), config.get("repo_url")))


KEPT = re.compile(r"(\]\([^)]*\)|<[^>]*>)")  # a link's target, an HTML tag: never broken


def breakable(text: str) -> str:
    pieces = KEPT.split(text)  # odd pieces are link targets and tags
    return "".join(re.sub(r"(?<=\w)([_=])(?=\w)", r"\1<wbr>", p) if i % 2 == 0 else p for i, p in enumerate(pieces))


def break_long_names(markdown: str) -> str:
    """In table rows, a line-break opportunity (<wbr>) after `_` and `=` outside code spans, so a
    header or cell holding anchor_masks=client wraps there instead of widening its column past
    the content column (docs/css/tables.css; scripts/check_site.py checks the result)."""
    lines, fenced = [], False
    for line in markdown.split("\n"):
        if FENCE.match(line):
            fenced = not fenced
        if not fenced and line.startswith("|"):
            parts = line.split("`")  # even parts are outside code spans
            line = "`".join(breakable(p) if i % 2 == 0 else p for i, p in enumerate(parts))
        lines.append(line)
    return "\n".join(lines)


def link_code_references(markdown: str, repo_url: str | None) -> str:
    """`clients/fedlc.py` -> [`clients/fedlc.py`](REPO/blob/main/clients/fedlc.py), for paths
    that exist in the checkout (a file, or a folder written with its slash); code blocks untouched."""
    if not repo_url:
        return markdown

    def linked(match: re.Match) -> str:
        path = match[1]
        target = ROOT / path
        is_file = "/" in path.rstrip("/") or "." in path
        if ".." in path or not (target.is_file() and is_file or path.endswith("/") and target.is_dir()):
            return match[0]
        kind = "tree" if target.is_dir() else "blob"
        return f"[{match[0]}]({repo_url.rstrip('/')}/{kind}/main/{path.rstrip('/')})"

    lines, fenced = [], False
    for line in markdown.split("\n"):
        if FENCE.match(line):
            fenced = not fenced
        lines.append(line if fenced or FENCE.match(line) else CODE_SPAN.sub(linked, line))
    return "\n".join(lines)
