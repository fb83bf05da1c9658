"""`memseal whatif` on CUDA memory snapshots as PyTorch writes them (pickle protocols 2 to 5, the
trace of _record_memory_history) and as memseal's --memory-viz writes them: the run's own settings
and each setting tried, the reserved peak with each, and whether each runs out where the run did.
The traces are built here, with results that follow from the caching allocator's rules by hand.
"""
import argparse
import json
import os
import pickle
import subprocess
import sys
import tempfile
import unittest

ARGS = None
MiB = 1 << 20


class Trace:
    """A device trace as torch.cuda.memory._snapshot() gives it; every entry shares one frames
    list, as a pickle then writes it once and refers back to it."""

    def __init__(self):
        self.entries = []
        self.frames = [{"filename": "train.py", "line": 10, "name": "step"}]
        self.base = 0x7F0000000000

    def add(self, action, address, size, **more):
        entry = {"action": action, "addr": self.base + address, "size": size, "stream": 0,
                 "time_us": len(self.entries), "frames": self.frames}
        entry.update(more)
        self.entries.append(entry)

    def alloc(self, address, size):
        self.add("alloc", address, size)

    def free(self, address, size):
        self.add("free_requested", address, size)
        self.add("free_completed", address, size)

    def oom(self, requested, device_free):
        self.entries.append({"action": "oom", "device_free": device_free, "size": requested,
                             "stream": 0, "time_us": len(self.entries), "frames": []})


def pinned_segment():
    """40 MiB freed, 25 and 12 MiB carved from its segment, the 25 freed: 30 MiB finds no room."""
    trace = Trace()
    trace.add("segment_alloc", 0, 40 * MiB)
    trace.alloc(0, 40 * MiB)
    trace.free(0, 40 * MiB)
    trace.alloc(0, 25 * MiB)
    trace.alloc(25 * MiB, 12 * MiB)
    trace.free(0, 25 * MiB)
    trace.oom(30 * MiB, 20 * MiB)
    return trace


def doubled(times):
    """A list holding twice the list before it, `times` deep: small as a pickle, 2**times values
    written out."""
    made = []
    for _ in range(times):
        made = [made, made]
    return made


def snapshot(trace, conf=""):
    return {"segments": [], "device_traces": [trace.entries],
            "allocator_settings": {"PYTORCH_CUDA_ALLOC_CONF": conf}}


def whatif(folder, content, *flags, protocol=4):
    path = os.path.join(folder, "snapshot.pickle")
    with open(path, "wb") as file:
        file.write(content if isinstance(content, bytes) else pickle.dumps(content, protocol))
    return subprocess.run([ARGS.memseal, "whatif", path, *flags], text=True, capture_output=True,
                          timeout=120)


def rows(result):
    return {row["setting"]: row for row in json.loads(result.stdout)["settings"]}


class WhatIf(unittest.TestCase):
    def setUp(self):
        self.folder = tempfile.mkdtemp()

    def test_expandable_segments_avoid_the_out_of_memory_of_a_pinned_segment(self):
        for protocol in (2, 3, 4, 5):
            result = whatif(self.folder, snapshot(pinned_segment()), "--json", protocol=protocol)
            self.assertEqual(result.returncode, 0, result.stderr)
            report = json.loads(result.stdout)
            self.assertEqual(report["schema"], "memseal.whatif/1")
            self.assertEqual(report["recorded"]["reserved_peak"], 40 * MiB)
            # The device memory the run had: what was reserved, and the device's free memory.
            self.assertEqual(report["device_bytes"], 60 * MiB)
            by_setting = rows(result)
            recorded = by_setting["(as recorded: the defaults)"]
            self.assertTrue(recorded["runs_out"])
            self.assertEqual(recorded["out_of_memory_at"], report["recorded"]["out_of_memory_at"])
            self.assertEqual(recorded["reserved_peak"], 40 * MiB)
            self.assertEqual(recorded["free_at_out_of_memory"], 28 * MiB)
            self.assertEqual(recorded["largest_free_block_at_out_of_memory"], 25 * MiB)
            expandable = by_setting["expandable_segments:True"]
            self.assertFalse(expandable["runs_out"])
            self.assertEqual(expandable["reserved_peak"], 60 * MiB)
            self.assertTrue(by_setting["max_split_size_mb:128"]["runs_out"])

    def test_the_text_names_the_setting_that_would_have_avoided_it(self):
        result = whatif(self.folder, snapshot(pinned_segment()), "--setting",
                        "expandable_segments:True")
        self.assertEqual(result.returncode, 0, result.stderr)
        lines = result.stdout.splitlines()
        self.assertIn("ran out of memory asking for 30.0 MiB", result.stdout)
        expandable = [line for line in lines if line.strip().startswith("expandable_segments")]
        self.assertEqual(len(expandable), 1, result.stdout)
        self.assertTrue(expandable[0].rstrip().endswith("no"), expandable[0])
        recorded = [line for line in lines if "(as recorded" in line]
        self.assertIn("yes, at event", recorded[0])
        self.assertIn("28.0 MiB of 40.0 MiB reserved free", recorded[0])

    def test_the_runs_own_settings_are_replayed_first(self):
        trace = pinned_segment()
        result = whatif(self.folder, snapshot(trace, "expandable_segments:True"), "--json",
                        "--setting", "garbage_collection_threshold:0.6")
        self.assertEqual(result.returncode, 0, result.stderr)
        settings = json.loads(result.stdout)["settings"]
        self.assertEqual(settings[0]["setting"], "(as recorded) expandable_segments:True")
        self.assertFalse(settings[0]["runs_out"])
        self.assertEqual(settings[1]["setting"], "garbage_collection_threshold:0.6")

    def test_a_suggestion_the_run_already_used_is_not_replayed_twice(self):
        result = whatif(self.folder, snapshot(pinned_segment(), "expandable_segments:True"),
                        "--json")
        self.assertEqual(result.returncode, 0, result.stderr)
        names = [row["setting"] for row in json.loads(result.stdout)["settings"]]
        self.assertEqual(names[0], "(as recorded) expandable_segments:True")
        self.assertNotIn("expandable_segments:True", names)
        self.assertIn("max_split_size_mb:128", names)

    def test_the_hosts_trace_in_memseals_own_file_is_not_replayed_as_a_gpu(self):
        # memseal's --memory-viz names its devices; the host's trace is no caching allocator's.
        host_and_gpu = snapshot(pinned_segment())
        host = Trace()
        host.alloc(0, 64 * MiB)
        host_and_gpu["device_traces"].insert(0, host.entries)
        host_and_gpu["memseal"] = {"devices": ["cpu", "cuda:0"]}
        result = whatif(self.folder, host_and_gpu, "--json")
        self.assertEqual(result.returncode, 0, result.stderr)
        report = json.loads(result.stdout)
        self.assertEqual(report["device"], 0)
        self.assertEqual(report["recorded"]["reserved_peak"], 40 * MiB)
        self.assertEqual(whatif(self.folder, host_and_gpu, "--device", "0").returncode, 0)
        host_only = {"memseal": {"devices": ["cpu"]}, "device_traces": [host.entries],
                     "segments": []}
        result = whatif(self.folder, host_only)
        self.assertEqual(result.returncode, 2, result.stdout)
        self.assertIn("no CUDA device's trace", result.stderr)
        self.assertEqual(result.stdout, "")

    def test_each_row_is_named_as_asked_and_keys_the_model_does_not_know_are_left_out(self):
        # The run's own settings hold a key of a newer torch: replayed without it, and said.
        trace = pinned_segment()
        result = whatif(self.folder, snapshot(trace, "future_knob:3,expandable_segments:True"),
                        "--json", "--setting", "expandable_segments:False")
        self.assertEqual(result.returncode, 0, result.stderr)
        report = json.loads(result.stdout)
        self.assertEqual(report["recorded"]["ignored_settings"], ["future_knob"])
        by_setting = rows(result)
        self.assertFalse(by_setting["(as recorded) expandable_segments:True"]["runs_out"])
        # The defaults, asked for by name: named so, and running out as the run did.
        self.assertTrue(by_setting["expandable_segments:False"]["runs_out"])
        text = whatif(self.folder, snapshot(trace, "future_knob:3"))
        self.assertEqual(text.returncode, 0, text.stderr)
        self.assertIn("the run's settings the model does not know, replayed without them: "
                      "future_knob", text.stdout)

    def test_a_trace_without_completed_frees_frees_blocks_when_the_program_does(self):
        trace = pinned_segment()
        trace.entries = [entry for entry in trace.entries
                         if entry["action"] != "free_completed"]
        by_setting = rows(whatif(self.folder, snapshot(trace), "--json"))
        recorded = by_setting["(as recorded: the defaults)"]
        self.assertTrue(recorded["runs_out"])
        self.assertEqual(recorded["free_at_out_of_memory"], 28 * MiB)
        self.assertFalse(by_setting["expandable_segments:True"]["runs_out"])

    def test_without_an_error_only_peaks_are_compared_unless_memory_is_given(self):
        trace = Trace()
        for step in range(4):  # sequences a little longer each step: a new segment each time
            trace.add("segment_alloc", step * 100 * MiB, (30 + 2 * step) * MiB)
            trace.alloc(step * 100 * MiB, (30 + 2 * step) * MiB)
            trace.free(step * 100 * MiB, (30 + 2 * step) * MiB)
        result = whatif(self.folder, snapshot(trace), "--json")
        self.assertEqual(result.returncode, 0, result.stderr)
        report = json.loads(result.stdout)
        self.assertIsNone(report["device_bytes"])
        by_setting = rows(result)
        self.assertEqual(by_setting["(as recorded: the defaults)"]["reserved_peak"],
                         (30 + 32 + 34 + 36) * MiB)
        self.assertEqual(report["recorded"]["reserved_peak"], (30 + 32 + 34 + 36) * MiB)
        # Expandable segments map 20 MiB pages and reuse the free block: 40 MiB for all four.
        self.assertEqual(by_setting["expandable_segments:True"]["reserved_peak"], 40 * MiB)
        self.assertFalse(any(row["runs_out"] for row in by_setting.values()))
        # In 70 MiB the cache is freed once to make room (for the third), with no error.
        limited = rows(whatif(self.folder, snapshot(trace), "--json", "--device-memory", "70MiB"))
        recorded = limited["(as recorded: the defaults)"]
        self.assertFalse(recorded["runs_out"])
        self.assertEqual(recorded["cache_flushes"], 1)

    def test_memseals_own_memory_viz_file_is_read(self):
        result = subprocess.run([ARGS.memseal, "whatif", ARGS.viz_sample, "--json"], text=True,
                                capture_output=True, timeout=120)
        self.assertEqual(result.returncode, 0, result.stderr)
        report = json.loads(result.stdout)
        self.assertGreater(report["allocations"], 0)
        recorded = report["settings"][0]
        self.assertGreater(recorded["reserved_peak"], 0)
        self.assertGreaterEqual(recorded["reserved_peak"], recorded["allocated_peak"])

    def test_what_is_not_a_snapshot_or_a_setting_is_refused_with_why(self):
        cases = [
            (b"not a pickle", [], "does not begin as a pickle does"),
            (pickle.dumps({"device_traces": [[]]}), [], "holds no allocation"),
            (pickle.dumps({"segments": []}), [], "no device_traces"),
            (pickle.dumps(snapshot(pinned_segment()))[:-20], [], "cut short"),
            (pickle.dumps(snapshot(pinned_segment())), ["--setting", "max_split_size_mb:4"],
             "max_split_size_mb"),
            (pickle.dumps(snapshot(pinned_segment())), ["--device-memory", "lots"], "not a size"),
            (pickle.dumps(snapshot(pinned_segment())), ["--device", "3"], "device 3"),
            # A pickle that would build an object (and could run code) is not read.
            (pickle.dumps({"device_traces": [[]], "x": OSError("no")}), [], "not plain data"),
            # A list inside itself, and one whose references back would write 2**40 values.
            (b"\x80\x02]q\x00(h\x00e.", [], "nested too deep"),
            (pickle.dumps({"device_traces": [doubled(40)]}), [], "refers back"),
        ]
        for content, flags, expected in cases:
            result = whatif(self.folder, content, *flags)
            self.assertEqual(result.returncode, 2, (expected, result.stdout))
            self.assertIn(expected, result.stderr)
            self.assertEqual(result.stdout, "")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--memseal", required=True)
    parser.add_argument("--viz-sample", required=True)
    ARGS, rest = parser.parse_known_args()
    unittest.main(argv=[sys.argv[0], *rest], verbosity=2)
