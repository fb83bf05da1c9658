"""`memseal run` on whole programs: epochs of training and validation, then a test pass, with the
leaks that last a phase or a reset period (examples/scripts/phases.py, examples/programs/phases.cpp),
run unmodified. Each leak is checked for its verdict, category and the line of the program that
makes it; each healthy pattern (metrics gathered per epoch, the fixed program) must stay silent.

The lines are looked up in the programs' own source by the code on them, never hard-coded.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import unittest

ARGS = None


def run(*command, timeout=600):
    """memseal run --json FILE ARGS...: (exit status, stderr, the JSON report)."""
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "report.json")
        result = subprocess.run([ARGS.memseal, "run", "--json", path, *command], text=True,
                                capture_output=True, timeout=timeout)
        report = None
        if os.path.exists(path):
            with open(path, encoding="utf-8") as file:
                report = json.load(file)
    return result.returncode, result.stderr, report


def line_of(path, code, after=None):
    """The number of the first line of `path` holding `code` (after the line holding `after`)."""
    with open(path, encoding="utf-8") as source:
        lines = source.read().splitlines()
    start = 0
    if after is not None:
        start = next(i for i, line in enumerate(lines) if after in line) + 1
    for number, line in enumerate(lines[start:], start + 1):
        if code in line:
            return number
    raise AssertionError(f"{code!r} is not in {path}")


def script():
    return os.path.join(ARGS.scripts, "phases.py")


def python(*options):
    return run("--", ARGS.python, script(), *options)


class PythonProgram(unittest.TestCase):
    def assert_leak(self, err, report, category, line):
        self.assertIsNotNone(report, err)
        self.assertEqual(report["verdict"], "leak", err)
        self.assertEqual([f["category"] for f in report["findings"]], [category], err)
        self.assertRegex(err, rf"phases\.py:{line}\b")

    def test_the_healthy_program_is_not_flagged(self):
        code, err, report = python("--leak", "none")
        self.assertEqual(code, 0, err)
        self.assertEqual(report["verdict"], "no_leak", err)
        # The program's own steps: training's are its optimizer's, the evaluation passes' the
        # model's calls in eval mode; each a phase begun once per epoch.
        phases = {p["name"]: p for p in report["phases"]}
        training = phases.get("optimizer steps (Adam)")
        evaluation = phases.get("calls (MLP in eval mode)")
        self.assertIsNotNone(training, err)
        self.assertIsNotNone(evaluation, err)
        self.assertTrue(training["backward_ran"], err)
        self.assertEqual(training["runs"], 2, err)
        # Evaluation's first batches are its own, and so is none of training's backward.
        self.assertFalse(evaluation["backward_ran"], err)
        self.assertGreaterEqual(evaluation["runs"], 2, err)
        self.assertIn("one step per call of Adam.step()", err)

    def test_with_op_loops_the_loops_come_from_the_programs_ops(self):
        code, err, report = run("--op-loops", "--", ARGS.python, script(), "--leak", "none")
        self.assertEqual(code, 0, err)
        self.assertEqual(report["verdict"], "no_leak", err)
        # Training and the evaluation passes are loops of their own, each begun more than once.
        loops = [p for p in report["phases"] if p["name"].startswith("loop ")]
        self.assertGreaterEqual(len(loops), 2, err)
        self.assertTrue(any(p["backward_ran"] and p["runs"] >= 2 for p in loops), err)
        self.assertTrue(any(not p["backward_ran"] for p in loops), err)
        self.assertIn("found after", err)  # the loop's note: the ops it took to find it
        self.assertNotIn("seen through PyTorch's hooks", err)

    def test_a_total_kept_in_trains_locals_is_found_though_returning_frees_it(self):
        code, err, report = python("--leak", "total-local", "--exit-code", "3")
        self.assertEqual(code, 3, err)
        self.assert_leak(err, report, "autograd-graph-retained",
                         line_of(script(), "# leak: total-local"))
        freed = report["findings"][0]["freed"]
        self.assertEqual(freed["times"], 2, err)  # once per epoch: train() returned each time
        self.assertGreater(freed["peak_bytes"], 0, err)
        self.assertIn("held", err)

    def test_a_total_reset_every_few_batches_is_one_finding_with_its_period(self):
        code, err, report = python("--leak", "total-reset", "--log-interval", "20")
        self.assertEqual(code, 0, err)
        self.assert_leak(err, report, "autograd-graph-retained",
                         line_of(script(), "# leak: total-reset"))
        freed = report["findings"][0]["freed"]
        self.assertGreaterEqual(freed["times"], 4, err)
        # In the loop's iterations: where iterations came closer together than a step costs,
        # several were one step, and the period in steps is shorter.
        period = freed.get("iterations_per_time") or freed["steps_per_time"]
        self.assertLess(abs(period - 20), 6, err)
        self.assertLessEqual(freed["steps_per_time"], period, err)
        self.assertRegex(err, r"built up and freed together \d+ times")

    def test_outputs_kept_by_a_validation_pass_with_grad_on_are_that_phases_leak(self):
        code, err, report = python("--leak", "val-grad")
        self.assertEqual(code, 0, err)
        made = line_of(script(), "output, state = model(data, state)", after="def evaluate")
        self.assert_leak(err, report, "grad-enabled-inference", made)
        freed = report["findings"][0]["freed"]
        self.assertIsNotNone(freed, err)
        phase = next(p for p in report["phases"] if p["name"] == freed["phase"])
        self.assertFalse(phase["backward_ran"], err)
        # A pass of about twenty steps, which frees what it kept as evaluate() returns: its holder
        # is found while the pass still holds it (a report at the build-up, not 100 ms later).
        holders = [h["description"] for h in report["python"]["holders"] if h["finding"] == 0]
        kept = line_of(script(), "outputs.append(output)  # leak: val-grad")
        self.assertTrue(holders and holders[0].startswith("list `outputs`"), err)
        self.assertIn(f"phases.py:{kept}", holders[0])

    def test_predictions_gathered_without_history_are_a_note_not_a_leak(self):
        # Validation passes of 60 batches: `memseal run` makes one step of iterations that come
        # closer together than a step costs, and on a loaded machine a pass of 30 came out as
        # too few steps for its build-up to be judged at all (no note, and no leak either).
        code, err, report = python("--leak", "metrics", "--eval-batches", "60")
        self.assertEqual(code, 0, err)
        self.assertEqual(report["verdict"], "no_leak", err)
        notes = [n for n in report["notes"] if n.startswith("held for a while, then freed")]
        self.assertEqual(len(notes), 1, err)
        line = line_of(script(), "outputs.append(output.argmax(dim=-1))")
        self.assertIn(f"phases.py:{line}", notes[0])

    def test_losses_kept_in_a_global_list_are_a_leak_of_the_whole_run(self):
        code, err, report = python("--leak", "global-list")
        self.assertEqual(code, 0, err)
        made = line_of(script(), "loss = criterion(output, targets)", after="def train")
        self.assert_leak(err, report, "autograd-graph-retained", made)
        self.assertIsNone(report["findings"][0].get("freed"), err)

    def test_an_lstm_and_a_transformer_block_are_judged_alike(self):
        for model, leak, category in (("lstm", "total-local", "autograd-graph-retained"),
                                      ("lstm", "none", None),
                                      ("transformer", "total-reset", "autograd-graph-retained")):
            with self.subTest(model=model, leak=leak):
                code, err, report = python("--model", model, "--leak", leak)
                self.assertEqual(code, 0, err)
                if category is None:
                    self.assertEqual(report["verdict"], "no_leak", err)
                    continue
                self.assert_leak(err, report, category, line_of(script(), f"# leak: {leak}"))
                self.assertIsNotNone(report["findings"][0]["freed"], err)


class CppProgram(unittest.TestCase):
    def source(self):
        return os.path.join(os.path.dirname(ARGS.scripts), "programs", "phases.cpp")

    def test_the_total_kept_in_trains_locals_is_found_in_a_cpp_program(self):
        code, err, report = run("--", ARGS.phases_program, "--leak", "total-local",
                                "--train-batches", "150", "--eval-batches", "40")
        self.assertEqual(code, 0, err)
        self.assertEqual(report["verdict"], "leak", err)
        finding = report["findings"][0]
        self.assertEqual(finding["category"], "autograd-graph-retained", err)
        self.assertIsNotNone(finding["freed"], err)
        line = line_of(self.source(), "// leak: total-local")
        self.assertRegex(err, rf"phases\.cpp:{line}\b")

    def test_the_healthy_cpp_program_is_not_flagged(self):
        code, err, report = run("--", ARGS.phases_program, "--leak", "none",
                                "--train-batches", "150", "--eval-batches", "40")
        self.assertEqual(code, 0, err)
        self.assertEqual(report["verdict"], "no_leak", err)
        self.assertTrue(re.search(r"loop \d", err), err)

    def test_a_loop_inside_the_step_is_not_taken_for_the_step(self):
        # --inner-steps runs a layer 12 times over its own output in each forward pass: a short
        # loop in the forward pass and another in the backward pass, inside each iteration.
        self.check_loop_inside_the_step(["--inner-steps", "12"])

    def test_a_loop_inside_the_step_of_varying_length_is_not_taken_for_the_step(self):
        # From 6 to 14 times, a different number in each pass (as sequences of several lengths):
        # no two iterations run the same ops.
        self.check_loop_inside_the_step(["--inner-steps", "14", "--inner-steps-from", "6"])

    def check_loop_inside_the_step(self, inner):
        for leak, verdict in (("none", "no_leak"), ("total-local", "leak")):
            code, err, report = run("--", ARGS.phases_program, "--leak", leak, *inner,
                                    "--train-batches", "150", "--eval-batches", "40")
            self.assertEqual(code, 0, err)
            self.assertEqual(report["verdict"], verdict, err)
            if leak == "total-local":
                self.assertEqual(report["findings"][0]["category"], "autograd-graph-retained",
                                 err)
                line = line_of(self.source(), "// leak: total-local")
                self.assertRegex(err, rf"phases\.cpp:{line}\b")
            # The training loop's steps are its 300 iterations (2 epochs of 150), less those it
            # took to find it: not the layers run in each one.
            training = max((p for p in report["phases"] if p["backward_ran"]),
                           key=lambda p: p["steps"])
            self.assertGreaterEqual(training["steps"], 200, err)
            self.assertLessEqual(training["steps"], 300, err)
            self.assertEqual(training["runs"], 2, err)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--memseal", required=True)
    parser.add_argument("--scripts", required=True)
    parser.add_argument("--python", required=True)
    parser.add_argument("--phases-program", required=True)
    ARGS, rest = parser.parse_known_args()
    unittest.main(argv=[sys.argv[0], *rest], verbosity=2)
