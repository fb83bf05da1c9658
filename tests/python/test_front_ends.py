"""Every Python case of the diagnosis table (tests/python/cases/) through both front ends a user
runs: `python -m memseal check CASE.py` (its step(i), called by memseal) and `memseal run -- python
run_case.py CASE.py` (the same step(i) in the program's own loop, which memseal must find). For a
loop both can see, both must give the same verdict, the same first category and the same holder:
the variable, container, buffer or hook that keeps the leak (counts aside: the runs differ in
length); and neither may give one cause (category and line) in two findings. Each front end with its own defaults: `run` the program's own steps, and --op-loops."""

import json
import os
import re
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
CASES = os.path.join(HERE, "cases")
RUN_CASE = os.path.join(HERE, "run_case.py")

# (case, environment, the category both front ends must give first; None: healthy).
TABLE = [
    ("healthy.py", {}, None),
    ("bounded_history.py", {}, None),
    ("lru_cache.py", {"MEMSEAL_TEST_LRU_MAXSIZE": "100"}, None),
    ("cycle_garbage.py", {}, None),
    ("losses_list.py", {}, "autograd-graph-retained"),
    ("memory_slots.py", {}, "autograd-graph-retained"),
    ("gan_error_total.py", {}, "autograd-graph-retained"),
    ("kept_cnn.py", {}, "grad-enabled-inference"),
    ("kept_resnet.py", {}, "grad-enabled-inference"),
    ("kv_buffer.py", {}, "grad-enabled-inference"),
    ("cache_by_shape.py", {}, "tensors-retained"),
    ("view_cache.py", {}, "tensors-retained"),
    ("lru_cache.py", {"MEMSEAL_TEST_LRU_MAXSIZE": "none"}, "tensors-retained"),
    ("hook_closure.py", {}, "tensors-retained"),
    ("partial_hook.py", {}, "tensors-retained"),
    ("method_hook.py", {}, "tensors-retained"),
    ("hook_inputs.py", {}, "tensors-retained"),
]

def _holder_root(report):
    """The first finding's first holder, as the name of what holds it: the description up to its
    first parenthesis, numbers left out (a longer run registers more hooks)."""
    holders = [h for h in (report.get("python") or {}).get("holders", []) if h["finding"] == 0]
    if not holders:
        return None
    return re.sub(r"\d+", "N", holders[0]["description"].split(" (", 1)[0])


def _causes_given_twice(report):
    """Findings that name a cause an earlier finding of the report already names: the same
    category and the same first line of the user's code (one finding per cause)."""
    seen, twice = set(), []
    for finding in report["findings"]:
        line = next((f"{frame['file']}:{frame['line']}" for frame in finding.get("frames") or []
                     if not frame.get("internal") and frame.get("file")), None)
        cause = (finding["category"], line)
        if line is not None and cause in seen:
            twice.append(cause)
        seen.add(cause)
    return twice


def _findings_naming_no_line(report):
    """The categories of the findings that name no line of the program's code (a report made
    where Python frames could not be read names none, and groups its findings otherwise)."""
    return [finding["category"] for finding in report["findings"]
            if not any(not frame.get("internal") and frame.get("file")
                       for frame in finding.get("frames") or [])]


def _summary(report):
    return {
        "verdict": report["verdict"],
        "first category": next((finding["category"] for finding in report["findings"]), None),
        "holder": _holder_root(report),
        "causes given twice": _causes_given_twice(report),
        "findings naming no line": _findings_naming_no_line(report),
    }


def _front_end(command, json_path, environment):
    env = dict(os.environ, **environment)
    result = subprocess.run(command, capture_output=True, text=True, env=env, timeout=600)
    output = result.stdout + result.stderr
    assert os.path.exists(json_path), output
    with open(json_path) as report:
        return _summary(json.load(report)), output


@pytest.mark.parametrize("flags", [(), ("--op-loops",)], ids=["program-steps", "op-loops"])
@pytest.mark.parametrize("case, environment, category", TABLE,
                         ids=[f"{case[:-3]}{'-' + '-'.join(env.values()) if env else ''}"
                              for case, env, _ in TABLE])
def test_check_and_run_agree(case, environment, category, flags, tmp_path):
    path = os.path.join(CASES, case)
    checked, check_output = _front_end(
        [sys.executable, "-m", "memseal", "check", "--steps", "200", "--json",
         str(tmp_path / "check.json"), path], str(tmp_path / "check.json"), environment)
    ran, run_output = _front_end(
        [sys.executable, "-m", "memseal", "run", *flags, "--json", str(tmp_path / "run.json"), "--",
         sys.executable, RUN_CASE, path, "--steps", "600"], str(tmp_path / "run.json"), environment)
    assert checked["verdict"] == ("leak" if category else "no_leak"), check_output
    assert checked["first category"] == category, check_output
    assert checked["causes given twice"] == [], check_output
    assert ran == checked, f"check: {checked}\nrun: {ran}\n{run_output}"


def test_a_run_too_short_for_the_collector_still_tells_its_garbage_from_a_leak(tmp_path):
    # 100 iterations: the collector has not freed the cycles yet when the program ends; memseal
    # run lets it run once at exit, and what it frees then is garbage, as in the Python module.
    # Warm-up 2: iterations closer together than a step costs are one step, and a loaded machine
    # may leave a few per step, still enough steps for the build-up to be judged.
    report_path = tmp_path / "run.json"
    result = subprocess.run(
        [sys.executable, "-m", "memseal", "run", "--warmup", "2", "--json", str(report_path), "--",
         sys.executable, RUN_CASE, os.path.join(CASES, "cycle_garbage.py"), "--steps", "100"],
        capture_output=True, text=True, timeout=600)
    output = result.stdout + result.stderr
    with open(report_path) as file:
        report = json.load(file)
    assert report["verdict"] == "no_leak", output
    assert any("freed by Python's garbage collector" in note for note in report["notes"]), output


@pytest.mark.parametrize("front_end", ["check", "run"])
def test_freed_memory_stranded_between_kept_graphs_is_the_leaks_cost(front_end, tmp_path):
    # Kept losses hold 4 bytes a step; the freed activations stranded between their graphs grow
    # the process by megabytes a step (the same loop without the list does not). Both front ends
    # charge that memory to the leak, and the note says it is the leak's, not malloc's own.
    path = os.path.join(CASES, "stranded_losses.py")
    report_path = tmp_path / "report.json"
    if front_end == "check":
        command = [sys.executable, "-m", "memseal", "check", "--steps", "1000", "--json",
                   str(report_path), path]
    else:
        command = [sys.executable, "-m", "memseal", "run", "--json", str(report_path), "--",
                   sys.executable, RUN_CASE, path, "--steps", "1000"]
    result = subprocess.run(command, capture_output=True, text=True, timeout=600)
    output = result.stdout + result.stderr
    with open(report_path) as file:
        report = json.load(file)
    assert report["verdict"] == "leak", output
    leak = report["findings"][0]
    assert leak["category"] == "autograd-graph-retained", output
    stranded = [note for note in report["notes"] if note.startswith("malloc holds")]
    assert stranded and "stranded between the autograd graphs" in stranded[0], output
    charged = leak["resident_bytes_per_step"] * (report["steps"] - report["warmup"])
    assert charged >= 64 << 20, output
