"""The site as a reader's browser shows it: every table whole inside the content column.

    python scripts/check_site.py                     # build the site, check every page, screenshot
    python scripts/check_site.py --width 1280 --shot /tmp/results-1280.png --pages results,guide/privacy-results

Builds the site (`mkdocs build --strict`, as tests/integration/test_docs_site.py does), opens every page of
it (or those `--pages` names, by their path in docs/ without `.md`) in headless Chromium at the given window width (1280 px: a laptop) and measures every table: a
table wider than its frame, or reaching past the content column's right edge, hides columns
(the results tables' last ones are the verdicts), so it is reported, one line each, and the
script exits 1. It then screenshots the first page that has a table with a `verdict` column
(results.md comes first), cropped to that table, and checks that column is inside the window. Needs `chromium` (Debian:
`apt-get install chromium`); exit 2 without it. Documented in docs/development/testing.md;
tests/integration/test_site_browser.py runs it on every page where Chromium is installed.
"""

from __future__ import annotations

import argparse
import base64
import fcntl
import json
import os
import select
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FIRST = "results"  # the page screenshotted: the drift study's verdicts
# Run in the page once it has loaded: every table's geometry, and the page's height.
PROBE = """(() => {
  const column = document.querySelector(".md-content__inner").getBoundingClientRect();
  const tables = [...document.querySelectorAll(".md-typeset table")].map((table, index) => {
    const frame = table.closest(".md-typeset__scrollwrap") || table.parentElement;
    const heads = [...table.querySelectorAll("thead th")];
    const last = heads.length ? heads[heads.length - 1].getBoundingClientRect() : table.getBoundingClientRect();
    const box = table.getBoundingClientRect();
    return {index, columns: heads.length, head: heads.map(h => h.textContent.trim()),
            hidden: frame.scrollWidth - frame.clientWidth, right: last.right, column_right: column.right,
            top: box.top + window.scrollY, bottom: box.bottom + window.scrollY, left: box.left};
  });
  return {height: document.documentElement.scrollHeight, tables};
})()"""
TABS = 4  # browsers at once: a page's time is mostly its wait for the web fonts' request, not CPU
ANSWER_SECONDS = 120  # what one page, or one command, may take before Chromium counts as hung


def chromium() -> str | None:
    return next((found for name in ("chromium", "chromium-browser", "google-chrome") if (found := shutil.which(name))), None)


def build(site: Path) -> None:
    """The site as the docs test builds it: strict, so a broken link fails here too."""
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-f", str(ROOT / "mkdocs.yml"),
                           "-d", str(site)], capture_output=True, text=True, check=False, timeout=300,
                          env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})  # fmt: skip
    if done.returncode != 0:
        raise SystemExit(f"error: mkdocs build --strict failed:\n{done.stderr[-3000:]}")


class Browser:
    """One headless Chromium, driven over its DevTools pipe (file descriptors 3 and 4): a page
    loads in a tab already started, where starting Chromium for each page cost seconds."""

    def __init__(self, width: int, height: int) -> None:
        to_chromium, self._out = os.pipe()
        self._in, from_chromium = os.pipe()
        # Chromium's ends above 9, then bash moves them to 3 and 4 (no preexec_fn: pages load in threads)
        reads, writes = (fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10) for fd in (to_chromium, from_chromium))
        os.close(to_chromium)
        os.close(from_chromium)
        flags = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--mute-audio",
                 f"--window-size={width},{height}", "--remote-debugging-pipe", "about:blank"]  # fmt: skip
        pipes = f'exec "$0" "$@" 3<&{reads} 4>&{writes} {reads}<&- {writes}>&-'
        self.process = subprocess.Popen(["bash", "-c", pipes, chromium(), *flags], stdout=subprocess.DEVNULL,
                                        stderr=subprocess.DEVNULL, pass_fds=(reads, writes))  # fmt: skip
        os.close(reads)
        os.close(writes)
        self._sent, self._buffer, self._session = 0, b"", None
        target = self.call("Target.createTarget", url="about:blank")["targetId"]
        self._session = self.call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        self.call("Page.enable")
        self.call("Emulation.setDeviceMetricsOverride", width=width, height=height, deviceScaleFactor=1, mobile=False)

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, *_: object) -> None:
        self.process.kill()
        self.process.wait()
        os.close(self._in)
        os.close(self._out)

    def _send(self, method: str, **params: object) -> int:
        self._sent += 1
        message = {"id": self._sent, "method": method, "params": params}
        message |= {"sessionId": self._session} if self._session else {}  # the tab's, once attached
        os.write(self._out, json.dumps(message).encode() + b"\0")
        return self._sent

    def _read(self) -> dict:
        while b"\0" not in self._buffer:
            if not select.select([self._in], [], [], ANSWER_SECONDS)[0]:
                raise SystemExit(f"error: chromium did not answer in {ANSWER_SECONDS} s")
            if not (chunk := os.read(self._in, 1 << 20)):
                raise SystemExit(f"error: chromium quit (exit {self.process.wait()})")
            self._buffer += chunk
        message, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(message)

    def call(self, method: str, **params: object) -> dict:
        """A command's result, once Chromium answers it."""
        sent = self._send(method, **params)
        while (reply := self._read()).get("id") != sent:
            pass
        if "error" in reply:
            raise SystemExit(f"error: chromium refused {method}: {reply['error']}")
        return reply["result"]

    def load(self, page: Path) -> None:
        """The page opened, back once its load event has fired (its scripts have run)."""
        sent, answered, loaded = self._send("Page.navigate", url=page.as_uri()), False, False
        while not (answered and loaded):
            reply = self._read()
            answered = answered or reply.get("id") == sent
            loaded = loaded or reply.get("method") == "Page.loadEventFired"
            if reply.get("id") == sent and "errorText" in reply.get("result", {}):
                raise SystemExit(f"error: chromium failed on {page}: {reply['result']['errorText']}")

    def evaluate(self, expression: str) -> object:
        return self.call("Runtime.evaluate", expression=expression, returnByValue=True)["result"].get("value")


def site_pages(site: Path) -> list[str]:
    """Every page of a built site by its name in docs/ without `.md` ('index' for the home page),
    FIRST first: the directories mkdocs wrote an index.html into, less its own 404 page."""
    names = sorted(str(p.parent.relative_to(site)) for p in site.rglob("index.html") if p.parent != site)
    return sorted(["index", *names], key=lambda name: name != FIRST)


def html(site: Path, name: str) -> Path:
    """A page's file in the site: docs/NAME.md is NAME/index.html, docs/DIR/index.md DIR/index.html."""
    return site / name.removesuffix("index") / "index.html" if name.split("/")[-1] == "index" else site / name / "index.html"


def measure(site: Path, names: list[str], width: int) -> dict[str, dict]:
    """Every table's geometry on each page, read by the probe, in one browser."""
    with Browser(width, 900) as browser:
        measured = {}
        for name in names:
            browser.load(html(site, name))
            measured[name] = browser.evaluate(PROBE)
        return measured


def problems(name: str, measured: dict) -> list[str]:
    """One line per table that a reader sees only in part."""
    found = []
    for table in measured["tables"]:
        where = f"{name}.md table {table['index'] + 1} ({table['columns']} columns, last '{table['head'][-1] if table['head'] else ''}')"
        if table["hidden"] > 1:
            found.append(f"{where}: {table['hidden']} px are hidden behind its scroll bar")
        elif table["right"] > table["column_right"] + 1:
            found.append(f"{where}: its last column ends {table['right'] - table['column_right']:.0f} px past the content column")
    return found


def verdict_table(measured: dict) -> dict | None:
    return next((t for t in measured["tables"] if t["head"] and "verdict" in t["head"][-1].lower()), None)


def screenshot(site: Path, name: str, measured: dict, width: int, shot: Path) -> str | None:
    """The page at `width`, cropped to its first table with a verdict column; a problem, or None."""
    table = verdict_table(measured)
    if table is None:
        return f"{name}.md has no table whose last column is a verdict"
    top = max(0, int(table["top"]) - 120)  # the page moved up to the table: a window-sized shot of it
    lift = f"document.head.insertAdjacentHTML('beforeend', '<style>.md-container {{ margin-top: -{top}px; }}</style>')"
    with Browser(width, min(2400, int(table["bottom"]) - top + 60)) as browser:
        browser.call("Emulation.setScrollbarsHidden", hidden=True)  # as --hide-scrollbars: none in the shot
        browser.load(html(site, name))
        browser.evaluate(lift)
        shot.write_bytes(base64.b64decode(browser.call("Page.captureScreenshot", format="png")["data"]))
    if table["right"] > width or table["hidden"] > 1:
        return f"{name}.md: the verdict column is not inside a {width} px window"
    return None


def check(pages: list[str] | None, width: int, shot: Path, site: Path | None = None) -> list[str]:
    """Builds the site (unless `site` holds one), measures `pages` (None: every page), screenshots
    the first with a verdict table; the problems."""
    with tempfile.TemporaryDirectory(prefix="fedpfn-site-") as temporary:
        site = site or Path(temporary) / "site"
        if not (site / "index.html").exists():
            build(site)
        pages = pages or site_pages(site)
        if missing := [name for name in pages if not html(site, name).exists()]:
            return [f"no page {name}.md in the site" for name in missing]
        shares = [pages[i::TABS] for i in range(min(TABS, len(pages)))]
        with ThreadPoolExecutor(max_workers=TABS) as pool:
            measured = {name: found for share in pool.map(lambda names: measure(site, names, width), shares)
                        for name, found in share.items()}  # fmt: skip
        found = [line for name in pages for line in problems(name, measured[name])]
        shot.parent.mkdir(parents=True, exist_ok=True)
        first = next((name for name in pages if verdict_table(measured[name])), pages[0])
        seen = screenshot(site, first, measured[first], width, shot)
        return found + ([seen] if seen else [])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python scripts/check_site.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--width", type=int, default=1280, help="the browser window's width in px (1280)")
    parser.add_argument("--pages", default="", help="pages to measure (comma-separated; every page of the site by default)")
    parser.add_argument("--shot", type=Path, default=Path(tempfile.gettempdir()) / "fedpfn-site" / "results-1280.png",
                        help="where the screenshot goes")  # fmt: skip
    parser.add_argument("--site", type=Path, help="a site already built (mkdocs build -d DIR); built afresh otherwise")
    args = parser.parse_args(argv)
    if chromium() is None:
        print("error: no chromium on PATH (Debian: apt-get install chromium)", file=sys.stderr)
        return 2
    found = check([p.strip() for p in args.pages.split(",") if p.strip()] or None, args.width, args.shot, args.site)
    for line in found:
        print(f"error: {line}", file=sys.stderr)
    print(f"screenshot: {args.shot}")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
