#!/usr/bin/env python3
"""Whole programs under `memseal run`, as the table in BENCHMARKS.md: for each program and leak, the
verdict, the first finding's category and line, the loops memseal found (the ops it needed to find
each, and the steps and runs each gave), and for a leak its phase freed, how many steps of the first
build-up passed before it was judged growing.

    bench/whole_programs.py --memseal build/release/memseal \\
        --python ~/.cache/memseal/venv-torch-2.11.0/bin/python --program build/release/examples/phases
"""
import argparse
import json
import os
import re
import subprocess
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LEAKS = ("none", "total-local", "total-reset", "val-grad", "metrics", "global-list")
EXPECTED = {
    "none": "no leak",
    "total-local": "autograd-graph-retained",
    "total-reset": "autograd-graph-retained",
    "val-grad": "grad-enabled-inference",
    "metrics": "no leak (noted)",
    "global-list": "autograd-graph-retained",
}


def run(memseal, command):
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "report.json")
        started = time.monotonic()
        result = subprocess.run([memseal, "run", "--json", path, "--", *command], text=True,
                                capture_output=True, timeout=900)
        seconds = time.monotonic() - started
        with open(path, encoding="utf-8") as file:
            return json.load(file), result.stderr, seconds


def describe(report, stderr):
    findings = report["findings"]
    noted = any(n.startswith("held for a while, then freed") for n in report["notes"])
    if not findings:
        verdict = "no leak (noted)" if noted else "no leak"
        return verdict, "", "", ""
    first = findings[0]
    line = ""
    for frame in first["frames"]:
        if not frame["internal"] and frame["file"]:
            line = f"{os.path.basename(frame['file'])}:{frame['line']}"
            break
    freed = first.get("freed")
    held = ""
    if freed:
        held = (f"{freed['times']}× every ~{freed['steps_per_time']:.0f} steps, found after "
                f"{freed['found_after_steps']} steps")
    return first["category"], f"{len(findings)}", line, held


def loops(stderr):
    found = re.findall(r"(loop \d+) \(([^)]*)\): one step per call of .*?\((\d+) ops, found after "
                       r"(\d+) ops\): (\d+) steps in (\d+) runs?", stderr.replace("\n      ", " "))
    return "; ".join(f"{name}: {ops} ops/iteration, found after {after} ops, {steps} steps, "
                     f"{runs} run{'s' if runs != '1' else ''}"
                     for name, _, ops, after, steps, runs in found)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--memseal", required=True)
    parser.add_argument("--python", required=True)
    parser.add_argument("--program", help="the C++ phases program (build/release/examples/phases)")
    args = parser.parse_args()
    script = os.path.join(ROOT, "examples", "scripts", "phases.py")
    rows = []
    for model in ("mlp", "lstm", "transformer"):
        for leak in LEAKS:
            rows.append((f"phases.py --model {model}", leak,
                         [args.python, script, "--model", model, "--leak", leak]))
    if args.program:
        for leak in LEAKS[:-1]:
            rows.append(("phases (C++)", leak, [args.program, "--leak", leak, "--train-batches",
                                                 "150", "--eval-batches", "40"]))
    print("| program | leak | expected | got | findings | line | held (first finding) | loops found "
          "| s |")
    print("|---|---|---|---|---:|---|---|---|---:|")
    wrong = 0
    for program, leak, command in rows:
        report, stderr, seconds = run(args.memseal, command)
        got, count, line, held = describe(report, stderr)
        expected = EXPECTED[leak]
        wrong += got != expected
        print(f"| {program} | {leak} | {expected} | {got} | {count} | {line} | {held} | "
              f"{loops(stderr)} | {seconds:.1f} |")
    print(f"\n{len(rows) - wrong} of {len(rows)} as expected")
    return 1 if wrong else 0


if __name__ == "__main__":
    raise SystemExit(main())
