"""The GPU examples (examples/cuda/), written as users write them, through both front ends a user
runs: `python -m memseal check CASE.py` (the file's setup() and step(i)) and `memseal run -- python
script.py` (the unmodified script, its own loop). Three leak and must get their cause on cuda:0
with the op and the Python line; three only look like leaks on a GPU and must stay silent. Then a
loop that grows its batch until CUDA runs out of memory, under `memseal run --memory-viz`: the
error names the forensics file, which says what was live, and torch's own readers open the trace.
Skipped where no CUDA device is found."""

import json
import os
import pickle
import re
import subprocess
import sys

import pytest
import torch

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
EXAMPLES = os.path.join(ROOT, "examples", "cuda")
MEMORY_VIZ_CHECK = os.path.join(ROOT, "tests", "report", "memory_viz_check.py")

# (script, category, the text of the line the finding must name, the device's verdict). Graphs kept
# by a running total hold no device memory once backward has freed what they saved: the device is
# steady, the autograd nodes grow.
LEAKS = [
    ("total_loss.py", "autograd-graph-retained", "total_loss += loss", "steady"),
    ("kept_predictions.py", "grad-enabled-inference", "predictions.append(model(batch)", "leak"),
    ("shape_cache.py", "tensors-retained", "table = torch.zeros(length", "leak"),
]
HEALTHY = ["adam_state.py", "cached_blocks.py", "variable_batch.py"]
FRONT_ENDS = ["check", "run"]


def memseal(front_end, script, tmp_path, *extra):
    """The report's JSON, the text output and the exit status of one front end on one script."""
    path = os.path.join(EXAMPLES, script)
    json_path = str(tmp_path / "report.json")
    # -X faulthandler: a crash shows its Python stack in the output.
    if front_end == "check":
        command = [sys.executable, "-X", "faulthandler", "-m", "memseal", "check", "--steps", "40", "--json", json_path,
                   *extra, path]
    else:
        command = [sys.executable, "-m", "memseal", "run", "--fail-on-leak", "--json", json_path,
                   *extra, "--", sys.executable, "-X", "faulthandler", path, "--steps", "150"]
    result = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, timeout=600)
    output = result.stdout + result.stderr
    assert os.path.exists(json_path), output
    with open(json_path) as report:
        return json.load(report), output, result.returncode


def line_of(script, text):
    with open(os.path.join(EXAMPLES, script)) as source:
        # The code's line, not a comment that shows the same code.
        return next(number for number, line in enumerate(source, 1)
                    if text in line and not line.lstrip().startswith("#"))


def cuda_device(report, output):
    devices = report.get("devices", [])
    assert devices, "no CUDA device in the report:\n" + output
    device = devices[0]
    assert device["device"] == "cuda:0", output
    assert device["reserved"] >= device["allocated"] > 0, output
    assert device["per_step"], output
    return device


@pytest.mark.parametrize("front_end", FRONT_ENDS)
@pytest.mark.parametrize("script,category,text,device_verdict", LEAKS,
                         ids=[leak[0] for leak in LEAKS])
def test_a_gpu_leak_gets_its_cause_on_the_device_with_the_op_and_the_line(
        front_end, script, category, text, device_verdict, tmp_path):
    report, output, status = memseal(front_end, script, tmp_path)
    assert status == 1, output
    assert report["verdict"] == "leak", output
    finding = report["findings"][0]
    assert finding["category"] == category, output
    device = cuda_device(report, output)
    assert device["verdict"] == device_verdict, output
    # The op and the Python line, of the finding or of one of its parts (a kept output's graph and
    # the activations it saved are one cause).
    sites = [finding] + finding.get("parts", [])
    assert all(site["op"].startswith("aten::") for site in sites), output
    line = line_of(script, text)
    python_lines = {(os.path.basename(frame["file"]), frame["line"])
                    for site in sites for frame in site["frames"] if frame["library"] == "python"}
    assert (script, line) in python_lines, output
    # Some tensor of the cause is on the GPU, and the text says so.
    devices = {(site.get("tensor") or {}).get("device") for site in sites}
    assert "cuda:0" in devices, output
    assert "cuda:0" in output, output
    assert re.search(r"cuda:0: .*allocated.*reserved", output, re.S), output


@pytest.mark.parametrize("front_end", FRONT_ENDS)
@pytest.mark.parametrize("script", HEALTHY)
def test_gpu_memory_that_rises_and_levels_off_is_not_a_leak(front_end, script, tmp_path):
    report, output, status = memseal(front_end, script, tmp_path)
    assert status == 0, output
    assert report["verdict"] == "no_leak", output
    assert not report["findings"], output
    device = cuda_device(report, output)
    assert device["verdict"] in ("steady", "caching", "fragmentation"), output
    assert "cuda:0" in output, output


def test_the_caching_allocator_keeping_freed_blocks_is_reserved_not_allocated(tmp_path):
    report, output, status = memseal("check", "cached_blocks.py", tmp_path)
    device = cuda_device(report, output)
    # Between steps the 128 MiB score matrix is freed to the cache: reserved stays high, allocated
    # goes back down to the queries.
    after_warmup = [point for point in device["per_step"] if point["step"] > report["warmup"]]
    assert after_warmup, output
    assert all(point["reserved"] - point["allocated"] >= 100 * 2**20 for point in after_warmup), output
    assert max(p["allocated"] for p in after_warmup) == min(p["allocated"] for p in after_warmup), \
        output


def test_an_out_of_memory_error_says_where_what_was_live_is(tmp_path):
    viz = str(tmp_path / "oom.pickle")
    env = dict(os.environ, MEMSEAL_OOM_DIR=str(tmp_path))
    result = subprocess.run(
        [sys.executable, "-m", "memseal", "run", "--memory-viz", viz, "--json",
         str(tmp_path / "report.json"), "--", sys.executable,
         os.path.join(EXAMPLES, "growing_batch_oom.py")],
        capture_output=True, text=True, cwd=ROOT, env=env, timeout=600)
    output = result.stdout + result.stderr
    assert result.returncode == 1, output  # the script's own status: OutOfMemoryError
    assert "OutOfMemoryError" in output, output
    said = re.search(r"memseal: CUDA out of memory on cuda:0 .*What was live is in (\S+\.json)",
                     output)
    assert said, output
    with open(said.group(1)) as forensics_file:
        forensics = json.load(forensics_file)
    assert forensics["schema"] == "memseal.cuda_oom/1", forensics
    assert forensics["device"] == 0, forensics
    assert forensics["requested_bytes"] > 0, forensics
    assert forensics["reserved_bytes"] >= forensics["allocated_bytes"] > 0, forensics
    assert "device_free_bytes" in forensics, forensics
    assert forensics["step"] > 0, forensics
    assert forensics["largest_sites"], forensics
    assert any("aten::" in site["name"] for site in forensics["largest_sites"]), forensics
    assert forensics["largest_blocks"], forensics
    # torch.cuda._memory_viz reads the run's trace (segsum, trace, the plots), whose device trace
    # ends in the out-of-memory event.
    check = subprocess.run([sys.executable, MEMORY_VIZ_CHECK, viz, "--expect-cuda-devices", "1"],
                           capture_output=True, text=True, timeout=600)
    assert check.returncode == 0, check.stdout + check.stderr + output
    with open(viz, "rb") as pickled:
        actions = [event["action"] for event in pickle.load(pickled)["device_traces"][0]]
    assert {"segment_alloc", "alloc", "free_completed", "oom"} <= set(actions), set(actions)
