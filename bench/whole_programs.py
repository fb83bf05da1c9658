#!/usr/bin/env python3
"""Whole programs under `memseal run`, as the table in BENCHMARKS.md: for each program and leak, the
verdict, the first finding's category, line and holder, what gave the steps (the program's own
optimizer, loader or model calls, seen through PyTorch's hooks; else the loops memseal found in
its ops, with the ops it needed to find each, and the steps and runs each gave), and for a leak its
phase freed, how many steps of the first build-up passed before it was judged growing. With
--frameworks, the Hugging Face and Lightning Trainer programs and the Accelerate loop of
tests/python/programs/ too (where those packages are installed).

    bench/whole_programs.py --memseal build/release/memseal \\
        --python ~/.cache/memseal/venv-torch-2.11.0/bin/python --program build/release/examples/phases \\
        [--frameworks]
"""
import argparse
import importlib.util
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
        return verdict, "", "", "", ""
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
    holders = [h["description"] for h in (report.get("python") or {}).get("holders", [])
               if h["finding"] == 0]
    holder = holders[0].split(" (", 1)[0] if holders else ""
    return first["category"], f"{len(findings)}", line, holder, held


def program_steps(report):
    """What the program's own machinery ended steps with, from where the report's steps came from."""
    found = []
    for note in report.get("steps_from", []):
        match = re.match(r"one step per call of (.*?), seen through PyTorch's hooks"
                         r"(?:; phase \"[^\"]*\")? \((\d+) steps?\)",
                         note.replace("\n", " "))
        if match:
            found.append(f"{match.group(1)}: {match.group(2)} steps")
    return "; ".join(found)


def loops(stderr):
    found = re.findall(r"(loop \d+) \(([^)]*)\): one step per call of .*?\((\d+) ops, found after "
                       r"(\d+) ops\): (\d+) steps? in (\d+) runs?", re.sub(r"\n +", " ", stderr))
    return "; ".join(f"{name}: {ops} ops/iteration, found after {after} ops, {steps} steps, "
                     f"{runs} run{'s' if runs != '1' else ''}"
                     for name, _, ops, after, steps, runs in found)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--memseal", required=True)
    parser.add_argument("--python", required=True)
    parser.add_argument("--program", help="the C++ phases program (build/release/examples/phases)")
    parser.add_argument("--frameworks", action="store_true",
                        help="also the Hugging Face and Lightning Trainer programs")
    args = parser.parse_args()
    script = os.path.join(ROOT, "examples", "scripts", "phases.py")
    rows = []
    for model in ("mlp", "lstm", "transformer"):
        for leak in LEAKS:
            rows.append((f"phases.py --model {model}", leak, EXPECTED[leak],
                         [args.python, script, "--model", model, "--leak", leak]))
    if args.program:
        for leak in LEAKS[:-1]:
            rows.append(("phases (C++)", leak, EXPECTED[leak],
                         [args.program, "--leak", leak, "--train-batches", "150",
                          "--eval-batches", "40"]))
    if args.frameworks:
        programs = os.path.join(ROOT, "tests", "python", "programs")
        graph = "autograd-graph-retained"
        for program, module, arguments, leaks in (
                ("hf_trainer.py", "transformers", ["--steps", "100"],
                 (("none", "no leak"), ("loss", graph), ("logits", graph))),
                ("lightning_trainer.py", "lightning", ["--batches", "60", "--epochs", "2"],
                 (("none", "no leak"), ("loss", graph), ("epoch-outputs", graph))),
                ("accelerate_loop.py", "accelerate", ["--batches", "100", "--epochs", "2"],
                 (("none", "no leak"), ("total", graph)))):
            if importlib.util.find_spec(module) is None:
                print(f"({program} left out: {module} is not installed)")
                continue
            for leak, expected in leaks:
                rows.append((program, leak, expected, [args.python, os.path.join(programs, program),
                                                       *arguments, "--leak", leak]))
    print("| program | leak | expected | got | findings | line | holder | held (first finding) | "
          "steps from | s |")
    print("|---|---|---|---|---:|---|---|---|---|---:|")
    wrong = 0
    for program, leak, expected, command in rows:
        report, stderr, seconds = run(args.memseal, command)
        got, count, line, holder, held = describe(report, stderr)
        wrong += got != expected
        steps = "; ".join(part for part in (loops(stderr), program_steps(report)) if part)
        print(f"| {program} | {leak} | {expected} | {got} | {count} | {line} | {holder} | {held} | "
              f"{steps} | {seconds:.1f} |")
    print(f"\n{len(rows) - wrong} of {len(rows)} as expected")
    return 1 if wrong else 0


if __name__ == "__main__":
    raise SystemExit(main())
