"""`memseal run` on Python programs whose step is the program's own: an optimizer's step(), a
DataLoader's batch, the outermost module's call, seen through PyTorch's hooks, never a loop inside
the step (time steps, decoding steps). The programs (tests/cli/programs/) run unmodified; each
healthy one must stay silent and each one-line leak be found with its cause.
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


def run(program, *flags, timeout=600):
    """memseal run --json FILE -- python PROGRAM FLAGS...: (exit status, stderr, the JSON report)."""
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "report.json")
        command = [ARGS.memseal, "run", "--json", path, "--", ARGS.python,
                   os.path.join(ARGS.programs, program), *flags]
        result = subprocess.run(command, text=True, capture_output=True, timeout=timeout)
        report = None
        if os.path.exists(path):
            with open(path, encoding="utf-8") as file:
                report = json.load(file)
    return result.returncode, result.stderr, report


def step_notes(report):
    return [line for line in report.get("steps_from", []) if "one step per call of" in line]


def categories(report):
    return [finding["category"] for finding in report["findings"]]


class ProgramsOwnSteps(unittest.TestCase):

    def assert_steps(self, report, expected, least):
        """One clock, `expected` ("LBFGS.step()"), which ended at least `least` steps."""
        notes = step_notes(report)
        self.assertEqual(len(notes), 1, report.get("steps_from"))
        self.assertIn(f"one step per call of {expected}", notes[0])
        self.assertIn("seen through PyTorch's hooks", notes[0])
        steps = int(re.search(r"\((\d+) steps?\)", notes[0]).group(1))
        self.assertGreaterEqual(steps, least, notes[0])

    def test_an_rnn_unrolled_over_time_steps_and_trained_with_lbfgs_is_healthy(self):
        code, err, report = run("time_sequence.py", "--steps", "60")
        self.assertEqual(code, 0, err)
        self.assertEqual(report["verdict"], "no_leak", err)
        # LBFGS's closure runs forward and backward several times inside one step.
        self.assert_steps(report, "LBFGS.step()", 55)

    def test_a_running_loss_that_keeps_its_graph_is_found_beside_a_loop_over_time_steps(self):
        code, err, report = run("crf_tagger.py", "--leak", "--steps", "300")
        self.assertEqual(code, 0, err)
        self.assertEqual(report["verdict"], "leak", err)
        self.assertEqual(categories(report)[0], "autograd-graph-retained", err)
        self.assertNotIn("grad-enabled-inference", categories(report), err)
        self.assert_steps(report, "SGD.step()", 100)

    def test_the_tagger_that_keeps_a_number_is_not_flagged(self):
        code, err, report = run("crf_tagger.py", "--steps", "300")
        self.assertEqual(code, 0, err)
        self.assertEqual(report["verdict"], "no_leak", err)

    def test_a_gan_with_two_optimizers_and_forked_loader_workers_is_one_clock_and_healthy(self):
        code, err, report = run("gan.py", "--epochs", "2")
        self.assertEqual(code, 0, err)
        self.assertEqual(report["verdict"], "no_leak", err)
        # The discriminator's optimizer steps first in each iteration: the generator's never
        # takes the clock, and neither do the loader's batches.
        self.assert_steps(report, "Adam.step()", 100)

    def test_a_gans_error_total_that_keeps_its_graph_is_named_as_a_kept_graph_and_its_total(self):
        # Each step begins at the loader's batch, not at the generator's update after the
        # discriminator's optimizer step: the total's add is in the step of the graph it keeps.
        code, err, report = run("gan.py", "--epochs", "2", "--leak")
        self.assertEqual(code, 0, err)
        self.assertEqual(categories(report), ["autograd-graph-retained"], err)
        holders = [h["description"] for h in report["python"]["holders"] if h["finding"] == 0]
        with open(os.path.join(ARGS.programs, "gan.py"), encoding="utf-8") as source:
            line = next(number for number, text in enumerate(source, 1)
                        if "errD_sum += errD" in text and ".item()" not in text)
        self.assertTrue(holders, err)
        self.assertIn(f"`errD_sum` (local of main (gan.py:{line}))", holders[0])

    def test_inference_steps_are_the_outermost_modules_calls_not_its_decoding_steps(self):
        code, err, report = run("greedy_decoder.py", "--leak")
        self.assertEqual(code, 0, err)
        self.assertEqual(report["verdict"], "leak", err)
        self.assertEqual(categories(report)[0], "tensors-retained", err)
        self.assert_steps(report, "Decoder in eval mode (the outermost module)", 100)
        code, err, report = run("greedy_decoder.py")
        self.assertEqual(code, 0, err)
        self.assertEqual(report["verdict"], "no_leak", err)

    def test_a_step_rule_the_user_chose_wins_over_the_programs_own(self):
        with tempfile.TemporaryDirectory() as folder:
            path = os.path.join(folder, "report.json")
            result = subprocess.run(
                [ARGS.memseal, "run", "--json", path, "--interval", "20ms", "--",
                 ARGS.python,
                 os.path.join(ARGS.programs, "crf_tagger.py"), "--steps", "100"],
                text=True, capture_output=True, timeout=600)
            self.assertEqual(result.returncode, 0, result.stderr)
            with open(path, encoding="utf-8") as file:
                steps_from = json.load(file)["steps_from"]
        self.assertFalse(any("PyTorch's hooks" in line for line in steps_from), steps_from)
        self.assertTrue(any("(--interval)" in line for line in steps_from), steps_from)


def main():
    global ARGS
    parser = argparse.ArgumentParser()
    parser.add_argument("--memseal", required=True)
    parser.add_argument("--python", required=True)
    parser.add_argument("--programs", required=True)
    ARGS, rest = parser.parse_known_args()
    unittest.main(argv=[sys.argv[0], *rest])


if __name__ == "__main__":
    main()
