#!/usr/bin/env python3
"""What `memseal run --live` costs the program: the example server's request loop (its own wall
time, start-up excluded) under `memseal run` and under `memseal run --live` with a browser tab
open on the page (a client that asks for each next version as the page's script does), the two
interleaved round by round. Prints each round and the median ratio live / plain.

    bench/live_page_cost.py [--build build/release] [--rounds 5] [--requests 20000]
"""
import argparse
import re
import statistics
import subprocess
import threading
import time
import urllib.request

LOOP = re.compile(r"request loop: \d+ requests in ([0-9.]+) ms")
URL = re.compile(r"memseal run: live page at (http://\S+/)")


def read_stderr(process, lines, found_url):
    for line in process.stderr:
        lines.append(line)
        match = URL.search(line)
        if match and not found_url:
            found_url.append(match.group(1))
    found_url.append(None)  # memseal is done: no URL will come


def open_tab(process, found_url, pages):
    """Fetches each next version of the page, as the page's script does, until memseal is gone."""
    while not found_url:
        if process.poll() is not None:
            return
        time.sleep(0.05)
    url, version = found_url[0], 0
    while url and process.poll() is None:
        try:
            with urllib.request.urlopen(f"{url}page?after={version}", timeout=30) as page:
                text = page.read().decode()
        except OSError:
            return
        pages.append(len(text))
        if 'data-ended="1"' in text:
            return  # the final page: the page's script asks no more
        found = re.search(r'data-version="(\d+)"', text)
        version = int(found.group(1)) if found else version


def loop_ms(build, requests, live):
    command = [f"{build}/memseal", "run", "--quiet"] + (["--live"] if live else []) + [
        "--", f"{build}/examples/inference_server", "--requests", str(requests), "--timing", "1"]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    lines, found_url, pages = [], [], []
    reader = threading.Thread(target=read_stderr, args=(process, lines, found_url))
    reader.start()
    if live:
        open_tab(process, found_url, pages)
    process.wait()
    reader.join()
    text = "".join(lines)
    match = LOOP.search(text)
    if process.returncode != 0 or not match:
        raise SystemExit(f"live_page_cost: {' '.join(command)} failed:\n{text[-3000:]}")
    return float(match.group(1)), len(pages)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--build", default="build/release")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--requests", type=int, default=20000)
    args = parser.parse_args()
    ratios = []
    for round_number in range(1, args.rounds + 1):
        plain, _ = loop_ms(args.build, args.requests, live=False)
        live, pages = loop_ms(args.build, args.requests, live=True)
        ratios.append(live / plain)
        print(f"round {round_number}: run {plain:.0f} ms, run --live {live:.0f} ms "
              f"({pages} pages fetched), ratio {live / plain:.3f}", flush=True)
    print(f"median ratio live / plain: {statistics.median(ratios):.3f} "
          f"(min {min(ratios):.3f}, max {max(ratios):.3f}, {args.rounds} rounds)")


if __name__ == "__main__":
    main()
