#!/usr/bin/env python3
"""The diagnosis of Python loops, as the table in BENCHMARKS.md: for each leak loop of the test
suite and the examples (one mistake each) and each healthy loop that only looks like a leak, the
verdict, the first finding's category, how many findings, and what the report names as holding it.
Each loop runs in its own process under `python -m memseal check` (the default detector), or with
`--front-end run` as a program of its own (tests/python/run_case.py: its step(i) in a loop of
`--iterations`) under `memseal run` (its defaults; `--op-loops` adds that flag), where the
table also says what memseal took as the step and how many steps the report judged.

    ~/.cache/memseal/venv-torch-2.11.0/bin/python bench/python/diagnosis_table.py
    ~/.cache/memseal/venv-torch-2.11.0/bin/python bench/python/diagnosis_table.py --front-end run

Exit status 1 when a verdict or a first category is wrong, a single-cause leak gives more than one
finding, or a leak with a Python path to its holder has none named.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CASES = os.path.join(ROOT, "tests", "python", "cases")
EXAMPLES = os.path.join(ROOT, "examples", "python")

# (file, expected first category or None for no leak, steps, environment)
LOOPS = [
    ("examples/python/leaky_training.py", "autograd-graph-retained", 30, {}),
    ("losses_list.py", "autograd-graph-retained", 30, {}),
    ("cache_by_shape.py", "tensors-retained", 30, {}),
    ("kept_cnn.py", "grad-enabled-inference", 30, {}),
    ("kept_resnet.py", "grad-enabled-inference", 30, {}),
    ("kv_buffer.py", "grad-enabled-inference", 30, {}),
    ("memory_slots.py", "autograd-graph-retained", 30, {}),
    ("gan_error_total.py", "autograd-graph-retained", 30, {}),
    ("stranded_losses.py", "autograd-graph-retained", 30, {}),
    ("hook_closure.py", "tensors-retained", 30, {}),
    ("partial_hook.py", "tensors-retained", 30, {}),
    ("hook_inputs.py", "tensors-retained", 30, {}),
    ("method_hook.py", "tensors-retained", 30, {}),
    ("view_cache.py", "tensors-retained", 30, {}),
    ("lru_cache.py", "tensors-retained", 60, {"MEMSEAL_TEST_LRU_MAXSIZE": "none"}),
    ("healthy.py", None, 30, {}),
    ("bounded_history.py", None, 200, {}),
    ("lru_cache.py", None, 300, {"MEMSEAL_TEST_LRU_MAXSIZE": "100"}),
    ("lru_cache.py", None, 600, {"MEMSEAL_TEST_LRU_MAXSIZE": "100"}),
    ("cycle_garbage.py", None, 500, {}),
]


RUN_CASE = os.path.join(ROOT, "tests", "python", "run_case.py")


def run(path, steps, env, args):
    with tempfile.TemporaryDirectory() as folder:
        report_path = os.path.join(folder, "report.json")
        if args.front_end == "check":
            command = [sys.executable, "-m", "memseal", "check", path, "--steps", str(steps),
                       "--json", report_path, "--quiet"]
        else:
            command = [sys.executable, "-m", "memseal", "run", "--json", report_path,
                       *(["--op-loops"] if args.op_loops else []), "--",
                       sys.executable, RUN_CASE, path, "--steps", str(args.iterations)]
        result = subprocess.run(command, env={**os.environ, **env}, capture_output=True, text=True,
                                timeout=900)
        if result.returncode not in (0, 1):
            raise SystemExit(f"{path}: exit {result.returncode}\n{result.stderr}")
        with open(report_path) as file:
            return json.load(file)


def step_source(report):
    """What `memseal run` took as the step (the report's steps_from)."""
    for note in report.get("steps_from", []):
        found = re.search(r"one step per call of (\S+)", note)
        if found:
            return found.group(1).rstrip(",")
    return "-"


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--front-end", choices=("check", "run"), default="check")
    parser.add_argument("--op-loops", action="store_true", help="memseal run --op-loops")
    parser.add_argument("--iterations", type=int, default=600, help="the loop's length under run")
    args = parser.parse_args()
    by_run = args.front_end == "run"
    print("| loop | steps | expected | verdict | first finding | findings | holder named |"
          + (" step |" if by_run else ""))
    print("|---|---:|---|---|---|---:|---|" + ("---|" if by_run else ""))
    wrong = 0
    for name, expected, steps, env in LOOPS:
        path = os.path.join(ROOT, name) if "/" in name else os.path.join(CASES, name)
        report = run(path, steps, env, args)
        if by_run:
            steps = report.get("steps", 0)
        findings = report.get("findings", [])
        leak = report.get("verdict") == "leak"
        first = findings[0]["category"] if leak else "-"
        holders = [h["description"] for h in report.get("python", {}).get("holders", [])
                   if h["finding"] == 0]
        verdict_right = leak == (expected is not None)
        category_right = expected is None or first == expected
        one = not leak or len(findings) == 1
        named = not leak or bool(holders) and "no Python object" not in holders[0] \
            and "no global" not in holders[0]
        wrong += 0 if verdict_right and category_right and one and named else 1
        label = name if not env else f"{name} ({', '.join(f'{k}={v}' for k, v in env.items())})"
        holder = holders[0].replace("|", "\\|") if holders else "-"
        print(f"| {os.path.basename(label)} | {steps} | {expected or 'no leak'} | "
              f"{'leak' if leak else 'no leak'} {'(right)' if verdict_right else '(WRONG)'} | "
              f"{first} {'' if category_right else '(WRONG)'} | {len(findings) if leak else 0} | "
              f"{holder if leak else '-'} |" + (f" {step_source(report)} |" if by_run else ""))
    print(f"\n{wrong} loop(s) wrong")
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
