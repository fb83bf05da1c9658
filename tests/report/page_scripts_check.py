"""The HTML report's scripts alone, in headless Chromium: src/report/html/report.js (errors said on
the page, every row open to print, the ready flag) and live.js (the live page's next versions put
in place with the open rows kept, its end, a server that is gone or answers with an error), each on
a small page of its own with a stand-in for the server (`fetch`), so each behaviour is seen without
memseal run or a program. Exit codes: 0 passed, 1 failed, 77 skipped (no Chromium).

    python3 tests/report/page_scripts_check.py --scripts src/report/html
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

from html_browser_check import SKIP, find_chromium  # beside this file

TIMEOUT_S = 120


def live_main(version, rows_open=(), ended=False, marker=""):
    """A live page's <main>: its status line (as page.cpp writes it) and three folded rows."""
    rows = "".join(f"<details{' open' if i in rows_open else ''}><summary>row {i}</summary>"
                   f"{marker}</details>" for i in range(3))
    return (f'<main class="wrap"><p class="card live-status" id="memseal-live" '
            f'data-version="{version}" data-ended="{1 if ended else 0}">running</p>{rows}</main>')


def page(body, scripts, before=""):
    """A page that runs `before` (the stand-in server), then the scripts, as the report does."""
    inline = "".join(f"<script>{script}</script>" for script in [before, *scripts] if script)
    return f"<!doctype html><html><head><meta charset='utf-8'>{inline}</head><body>{body}</body></html>"


def server(answers):
    """A stand-in `fetch`: the i-th request gets answers[i] (a page's text, an HTTP status, or
    'refused'); every URL asked is kept in data-check-asked."""
    return ("var answers = " + json.dumps(answers) + ";"
            "var asked = [];"
            "window.fetch = function (url) {"
            "  asked.push(url); document.documentElement.dataset.checkAsked = asked.join(' ');"
            "  var answer = answers[Math.min(asked.length, answers.length) - 1];"
            "  if (answer === 'refused') return Promise.reject(new TypeError('Failed to fetch'));"
            "  var status = typeof answer === 'number' ? answer : 200;"
            "  return Promise.resolve({ok: status === 200, status: status,"
            "    text: function () { return Promise.resolve(String(answer)); }});"
            "};")


def attribute(dom, name):
    match = re.search(r"<html[^>]*\b" + name + r'="([^"]*)"', dom)
    return match.group(1) if match else None


def open_rows(dom):
    main = dom[dom.rfind("<body"):]  # not the stand-in server's pages, in the head
    return [i for i, row in enumerate(re.findall(r"<details[^>]*>", main)) if " open" in row]


def dump(chromium, folder, name, html, budget_ms=8000):
    path = os.path.join(folder, name + ".html")
    with open(path, "w") as file:
        file.write(html)
    profile = tempfile.mkdtemp(dir=folder)
    result = subprocess.run(
        [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
         f"--user-data-dir={profile}", f"--virtual-time-budget={budget_ms}", "--dump-dom",
         "file://" + path], capture_output=True, text=True, timeout=TIMEOUT_S, errors="replace")
    return result.stdout


def checks(chromium, folder, report_js, live_js):
    """(what, holds, the page's DOM) for every behaviour."""
    results = []

    # report.js: script errors and rejected promises are said on the page; printing opens every
    # row; the page says when it has loaded.
    errors = ("window.addEventListener('load', function () { setTimeout(function () {"
              "  window.dispatchEvent(new Event('beforeprint'));"
              "  Promise.reject('on purpose');"
              "  setTimeout(function () { notDefinedAnywhere(); }, 0);"
              "}, 0); });")
    dom = dump(chromium, folder, "report", page(live_main(1), [report_js, errors]))
    said = attribute(dom, "data-memseal-errors") or ""
    results += [
        ("report.js: the page says it has loaded", attribute(dom, "data-memseal-ready") == "1", dom),
        ("report.js: printing opens every row", open_rows(dom) == [0, 1, 2], dom),
        ("report.js: a script error is said on the page", "notDefinedAnywhere" in said, dom),
        ("report.js: a rejected promise is said on the page",
         "unhandled rejection: on purpose" in said, dom),
    ]

    # live.js: two new versions, the second the program's end; the row opened on the first page
    # stays open through both, and nothing is asked after the end.
    versions = [page(live_main(2, marker="<b>v2</b>"), []),
                page(live_main(3, ended=True, marker="<b>v3</b>"), [])]
    dom = dump(chromium, folder, "live", page(live_main(1, rows_open=(1,)), [report_js, live_js],
                                              before=server(versions)))
    results += [
        ("live.js: each version asks for the next after the one it shows",
         attribute(dom, "data-check-asked") == "/page?after=1 /page?after=2", dom),
        ("live.js: both versions were put in place",
         attribute(dom, "data-memseal-updates") == "2" and "<b>v3</b>" in dom, dom),
        ("live.js: the open row stays open", open_rows(dom) == [1], dom),
        ("live.js: the program's end ends the updates", attribute(dom, "data-memseal-live") == "ended",
         dom),
        ("live.js: no script error", attribute(dom, "data-memseal-errors") is None, dom),
    ]

    # live.js: a server that is gone, or that answers with an error, leaves the last page with a
    # line that says so.
    for name, answers in (("gone", ["refused"]), ("error", [500])):
        dom = dump(chromium, folder, "live-" + name,
                   page(live_main(4, marker="<b>kept</b>"), [report_js, live_js],
                        before=server(answers)))
        results += [
            (f"live.js ({name}): the page says memseal is gone",
             attribute(dom, "data-memseal-live") == "gone" and "memseal run is gone" in dom, dom),
            (f"live.js ({name}): the last report stays", "<b>kept</b>" in dom, dom),
            (f"live.js ({name}): asked once, then stopped",
             attribute(dom, "data-check-asked") == "/page?after=4", dom),
            (f"live.js ({name}): no script error", attribute(dom, "data-memseal-errors") is None,
             dom),
        ]
    return results


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--scripts", required=True, help="the folder of report.js and live.js")
    args = parser.parse_args()
    chromium = find_chromium()
    if chromium is None:
        print("SKIP: chromium not found (set $CHROMIUM or install chromium)")
        return SKIP
    with open(os.path.join(args.scripts, "report.js")) as file:
        report_js = file.read()
    with open(os.path.join(args.scripts, "live.js")) as file:
        live_js = file.read()
    with tempfile.TemporaryDirectory(prefix="memseal-scripts-") as folder:
        results = checks(chromium, folder, report_js, live_js)
    failed = [(what, dom) for what, holds, dom in results if not holds]
    for what, holds, _ in results:
        print(("ok      " if holds else "FAILED  ") + what)
    for what, dom in failed:
        print(f"\n{what}: the page was\n{dom[-3000:]}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
