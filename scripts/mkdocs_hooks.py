"""mkdocs hook: a link from a docs page to a file beside docs/ (the generated
results_earlier.md links `../benchmarks/README.md`) becomes that file's path in code, since
the site holds docs/ only. Every link inside docs/ stays for the strict build to check, and
the generated pages are never edited for the site."""

from __future__ import annotations

import posixpath
import re

LINK = re.compile(r"\[([^\]]+)\]\(([^)#\s:]+)\)")


def on_page_markdown(markdown: str, page, config, files) -> str:
    """`[text](../path)` leaving docs/ -> `text` (`path`), the path from the repository root."""
    folder = posixpath.dirname(page.file.src_uri)

    def outside_as_path(match: re.Match) -> str:
        text, target = match[1], match[2]
        resolved = posixpath.normpath(posixpath.join("docs", folder, target))
        if resolved.startswith("docs/"):
            return match[0]
        return f"`{resolved}`" if text.strip("`") == resolved else f"{text} (`{resolved}`)"

    return LINK.sub(outside_as_path, markdown)
