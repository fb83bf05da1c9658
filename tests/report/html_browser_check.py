#!/usr/bin/env python3
"""Opens a memseal HTML report in headless Chromium and checks what a person would get: the page's
script ran without errors, the verdict, the finding cards and the charts are there, nothing that
came in with the report's text ran, and the page renders to a screenshot.

    html_browser_check.py --html FILE [--expect-verdict leak|no_leak] [--expect-cards N]
                          [--expect-chart ID ...] [--expect-title TEXT] [--screenshot OUT.png]
                          [--reference REF.png]

--reference compares the screenshot with a stored one, both reduced to blocks of 8x8 pixels in
grey, so that a broken layout (a card out of place, a style lost, a chart gone) fails while a
different anti-aliasing does not; MEMSEAL_UPDATE_SCREENSHOT_REFERENCE=1 writes the reference
instead (look at it before committing it). The comparison needs Pillow; without it, it is skipped
and says so.

Chromium is found as $CHROMIUM, `chromium`, `chromium-browser` or `google-chrome`. Exit codes: 0
every check passed, 1 a check failed (each failure is printed), 2 usage, 77 no Chromium (CTest's
SKIP_RETURN_CODE). Standard library only, but for Pillow in --reference."""

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from html.parser import HTMLParser
from pathlib import Path

SKIP = 77
TIMEOUT_S = 120
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"

# Chromium logs the page's console as `INFO:CONSOLE(12)] "message", source: URL (12)` (older) or
# `INFO:CONSOLE:12] "message", source: URL (12)` (newer); everything else on stderr is Chromium's
# own (dbus, GPU, sandbox) and says nothing about the page.
CONSOLE_LINE = re.compile(
    r':CONSOLE(?:\(\d+\)|:\d+)\]\s*"(?P<message>.*)", source: (?P<source>\S*)')
# Uncaught exceptions, console.error of an Error, and Content-Security-Policy refusals (a script or
# resource the page was not allowed to run or load: Chromium says "Refused to ..." or, newer,
# "... violates the following Content Security Policy directive").
CONSOLE_FAILURE = re.compile(r"Uncaught|Error|Refused|Content Security Policy")


def find_chromium():
    candidates = [os.environ.get("CHROMIUM")] if os.environ.get("CHROMIUM") else []
    candidates += ["chromium", "chromium-browser", "google-chrome"]
    for candidate in candidates:
        path = shutil.which(candidate)
        if path:
            return path
    return None


class DomSummary(HTMLParser):
    """What the checks need from the dumped DOM: every element's tag and attributes, the title."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.elements = []  # (tag, {attribute: value})
        self.title = None
        self._in_title = False

    def handle_starttag(self, tag, attrs):
        self.elements.append((tag, {name: value or "" for name, value in attrs}))
        if tag == "title" and self.title is None:
            self._in_title = True
            self.title = ""

    def handle_startendtag(self, tag, attrs):
        self.elements.append((tag, {name: value or "" for name, value in attrs}))

    def handle_endtag(self, tag):
        if tag == "title":
            self._in_title = False

    def handle_data(self, data):
        if self._in_title:
            self.title += data

    def first(self, tag):
        return next((attrs for name, attrs in self.elements if name == tag), None)

    def by_id(self, element_id):
        return [(tag, attrs) for tag, attrs in self.elements if attrs.get("id") == element_id]

    def with_class(self, css_class):
        return [attrs for _, attrs in self.elements if css_class in attrs.get("class", "").split()]


def run_chromium(chromium, profile, arguments):
    command = [
        chromium,
        "--headless",
        "--no-sandbox",  # headless Chromium refuses to run as root with its sandbox
        "--disable-gpu",
        "--no-first-run",
        "--hide-scrollbars",
        f"--user-data-dir={profile}",
        "--enable-logging=stderr",
        "--v=0",
        "--virtual-time-budget=2000",
    ] + arguments
    try:
        return subprocess.run(command, capture_output=True, text=True, timeout=TIMEOUT_S,
                              errors="replace")
    except subprocess.TimeoutExpired:
        return None


_notes_shown = set()


def console_failures(stderr, page_url):
    failures = []
    for line in stderr.splitlines():
        match = CONSOLE_LINE.search(line)
        if not match:
            continue
        source = match.group("source")
        if source and not source.startswith(page_url):
            continue  # an extension or Chromium's own pages, not this report
        message = match.group("message")
        if CONSOLE_FAILURE.search(message):
            failures.append(f"console: {message}")
        elif message not in _notes_shown:
            _notes_shown.add(message)
            print(f"note: console message from the page: {message}")
    return failures


def check_dom(dom_text, args):
    failures = []
    dom = DomSummary()
    dom.feed(dom_text)
    dom.close()

    root = dom.first("html") or {}
    if root.get("data-memseal-ready") != "1":
        failures.append("the page's script did not run to its load handler "
                        "(no data-memseal-ready=\"1\" on <html>; a Content-Security-Policy hash "
                        "that does not match the script blocks it)")
    if "data-memseal-errors" in root:
        failures.append(f"the page reported JavaScript errors: {root['data-memseal-errors']!r}")

    if args.expect_verdict:
        verdicts = dom.by_id("verdict")
        if not verdicts:
            failures.append("no element with id=\"verdict\"")
        elif verdicts[0][1].get("data-verdict") != args.expect_verdict:
            failures.append(f"verdict is {verdicts[0][1].get('data-verdict')!r}, "
                            f"expected {args.expect_verdict!r}")

    if args.expect_cards is not None:
        cards = len(dom.with_class("finding-card"))
        if cards != args.expect_cards:
            failures.append(f"{cards} elements with class finding-card, expected "
                            f"{args.expect_cards}")

    for chart in args.expect_chart:
        if not any(tag == "svg" for tag, _ in dom.by_id(chart)):
            failures.append(f"no <svg id=\"{chart}\">")

    # Text from the report must stay text: one script (the page's own), no event handler
    # attributes, and no markup that injected text would have made.
    scripts = sum(1 for tag, _ in dom.elements if tag == "script")
    if scripts != 1:
        failures.append(f"{scripts} <script> elements in the DOM, expected only the page's own")
    handlers = sorted({name for _, attrs in dom.elements for name in attrs
                       if name.startswith("on")})
    if handlers:
        failures.append(f"event handler attributes in the DOM: {', '.join(handlers)}")
    if re.search(r"<script>\s*alert", dom_text, re.IGNORECASE):
        failures.append("the DOM holds an unescaped <script>alert")

    if args.expect_title is not None:
        if dom.title is None or not dom.title.startswith(args.expect_title):
            failures.append(f"document title is {dom.title!r}, expected it to start with "
                            f"{args.expect_title!r}")
    return failures


def check_screenshot(chromium, page_url, path):
    with tempfile.TemporaryDirectory(prefix="memseal-chromium-") as profile:
        result = run_chromium(chromium, profile,
                              [f"--screenshot={path}", "--window-size=1280,2000", page_url])
    if result is None:
        return [f"chromium took over {TIMEOUT_S} s to take the screenshot"]
    if not path.is_file() or path.stat().st_size == 0:
        return [f"no screenshot written to {path} (chromium exit {result.returncode}):\n"
                + result.stderr[-2000:]]
    with open(path, "rb") as png:
        if png.read(len(PNG_SIGNATURE)) != PNG_SIGNATURE:
            return [f"{path} is not a PNG"]
    return console_failures(result.stderr, page_url)


# The screenshot against its reference: grey blocks of 8x8 pixels may differ by this much on average
# (0-255), and at most this share of blocks by more than BLOCK_CHANGED.
MEAN_TOLERANCE = 3.0
BLOCK_CHANGED = 24
CHANGED_SHARE_TOLERANCE = 0.02


def blocks(image):
    """The image in grey, each 8x8 block its mean."""
    grey = image.convert("L")
    return grey.reduce(8)


def compare_to_reference(screenshot, reference):
    try:
        from PIL import Image, ImageChops, ImageStat
    except ImportError:
        print("SKIP: the reference comparison needs Pillow (pip install pillow)")
        return []
    shot = blocks(Image.open(screenshot))
    if os.environ.get("MEMSEAL_UPDATE_SCREENSHOT_REFERENCE") == "1":
        reference.parent.mkdir(parents=True, exist_ok=True)
        shot.save(reference, optimize=True)
        print(f"wrote the reference {reference}")
        return []
    if not reference.is_file():
        return [f"no reference {reference} (MEMSEAL_UPDATE_SCREENSHOT_REFERENCE=1 writes it)"]
    expected = Image.open(reference).convert("L")
    if expected.size != shot.size:
        return [f"the screenshot is {shot.size} blocks, the reference {expected.size}"]
    difference = ImageChops.difference(shot, expected)
    mean = ImageStat.Stat(difference).mean[0]
    histogram = difference.histogram()
    changed = sum(histogram[BLOCK_CHANGED + 1:]) / (shot.size[0] * shot.size[1])
    print(f"screenshot against {reference.name}: mean difference {mean:.2f}, "
          f"{100 * changed:.2f}% of blocks changed")
    failures = []
    if mean > MEAN_TOLERANCE or changed > CHANGED_SHARE_TOLERANCE:
        failures.append(f"the page no longer looks like {reference} (mean difference {mean:.2f} "
                        f"> {MEAN_TOLERANCE} or {100 * changed:.2f}% of 8x8 blocks changed > "
                        f"{100 * CHANGED_SHARE_TOLERANCE:.0f}%): a layout change; if it is "
                        "meant, MEMSEAL_UPDATE_SCREENSHOT_REFERENCE=1 writes the new reference")
    return failures


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--html", required=True, type=Path, help="the report page to open")
    parser.add_argument("--expect-verdict", choices=["leak", "no_leak"])
    parser.add_argument("--expect-cards", type=int, metavar="N",
                        help="number of elements with class finding-card")
    parser.add_argument("--expect-chart", nargs="+", default=[], metavar="ID",
                        help="ids of <svg> charts that must be present")
    parser.add_argument("--expect-title", metavar="TEXT",
                        help="the title the page was made with (as text, not escaped)")
    parser.add_argument("--screenshot", type=Path, metavar="OUT.png",
                        help="where to keep the screenshot (default: a temporary file)")
    parser.add_argument("--reference", type=Path, metavar="REF.png",
                        help="a stored screenshot (8x8 grey blocks) this one must look like")
    args = parser.parse_args()

    if not args.html.is_file():
        print(f"FAIL: {args.html} does not exist", file=sys.stderr)
        return 2
    chromium = find_chromium()
    if chromium is None:
        print("SKIP: chromium not found (set $CHROMIUM or install chromium)")
        return SKIP
    page_url = args.html.resolve().as_uri()

    with tempfile.TemporaryDirectory(prefix="memseal-chromium-") as profile:
        result = run_chromium(chromium, profile, ["--dump-dom", page_url])
    if result is None:
        print(f"FAIL: chromium took over {TIMEOUT_S} s to load {page_url}", file=sys.stderr)
        return 1
    if result.returncode != 0 or "<html" not in result.stdout:
        print(f"FAIL: chromium could not load {page_url} (exit {result.returncode}):\n"
              + result.stderr[-2000:], file=sys.stderr)
        return 1
    failures = check_dom(result.stdout, args)
    failures += console_failures(result.stderr, page_url)

    with tempfile.TemporaryDirectory(prefix="memseal-shot-") as shots:
        shot = args.screenshot.resolve() if args.screenshot else Path(shots) / "page.png"
        shot.parent.mkdir(parents=True, exist_ok=True)
        shot_failures = check_screenshot(chromium, page_url, shot)
        failures += shot_failures
        if args.reference and not shot_failures:
            failures += compare_to_reference(shot, args.reference.resolve())

    failures = list(dict.fromkeys(failures))  # both runs see the same console messages
    if failures:
        for failure in failures:
            print(f"FAIL: {failure}", file=sys.stderr)
        print(f"{args.html}: {len(failures)} check(s) failed", file=sys.stderr)
        return 1
    print(f"OK: {args.html} (chromium {chromium})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
