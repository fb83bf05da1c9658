"""`memseal run` on distributed jobs as people launch them: torchrun (python -m torch.distributed.run,
gloo on the CPU) starting 2 or 4 ranks of examples/scripts/ddp_train.py, unmodified. Every rank is
watched without --follow-fork, its report names its rank, the reports land in one folder
(rank-N.json/.html, merged.*), and the merged view matches causes across ranks: one for every rank,
a divergent one for rank 0 only, missing ranks, the spread of uneven peaks; `memseal merge` prints
the same again.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import unittest

ARGS = None


def job(folder, ranks, *script_args, extra=()):
    """memseal run --job-dir FOLDER/job -- torchrun ...: (exit status, stdout, stderr)."""
    command = [ARGS.memseal, "run", "--job-dir", os.path.join(folder, "job"), *extra, "--",
               ARGS.python, "-m", "torch.distributed.run", "--standalone",
               f"--nproc-per-node={ranks}", os.path.join(ARGS.scripts, "ddp_train.py"),
               "--steps", "120", *script_args]
    result = subprocess.run(command, capture_output=True, text=True, timeout=600,
                            env=dict(os.environ, OMP_NUM_THREADS="1"))
    return result.returncode, result.stdout, result.stderr


def merged(folder):
    with open(os.path.join(folder, "job", "merged.json")) as file:
        return json.load(file)


class Job(unittest.TestCase):
    def setUp(self):
        self.folder = tempfile.mkdtemp()

    def test_a_healthy_job_has_no_finding_on_any_rank(self):
        code, out, err = job(self.folder, 2)
        self.assertEqual(code, 0, err)
        self.assertEqual(out.count(": done"), 2, err)
        self.assertIn("job of 2 ranks: no leak on any rank that reported", err)
        self.assertIn("the job's launcher; it ran no steps of its own", err)
        report = merged(self.folder)
        self.assertEqual(report["schema"], "memseal.merged/1")
        self.assertEqual([rank["status"] for rank in report["ranks"]], ["no_leak", "no_leak"])
        for number in (0, 1):
            with open(os.path.join(self.folder, "job", f"rank-{number}.json")) as file:
                rank = json.load(file)
            self.assertEqual(rank["rank"]["rank"], number)
            self.assertEqual(rank["rank"]["world_size"], 2)
            self.assertGreater(rank["steps"], 50)

    def test_a_leak_of_rank_0_only_is_divergent_with_its_line(self):
        code, _, err = job(self.folder, 2, "--leak", "rank0", extra=["--fail-on-leak"])
        self.assertEqual(code, 1, err)
        report = merged(self.folder)
        self.assertEqual(len(report["findings"]), 1, err)
        finding = report["findings"][0]
        self.assertEqual(finding["category"], "autograd-graph-retained")
        self.assertEqual(finding["ranks"], [0])
        self.assertFalse(finding["every_reporting_rank"])
        self.assertRegex(finding["site"], r"ddp_train\.py:\d+$")
        self.assertIn("rank 0 only", err)
        self.assertIn("divergent", err)
        # The list rank 0 keeps its losses in, named by rank 0's heap search, in the merged view.
        self.assertTrue(finding["holders"][0].startswith("list `logged_losses` (local of main"),
                        finding["holders"])
        self.assertRegex(err, r"kept by +list `logged_losses` \(local of main \(ddp_train\.py:\d+\)\)")
        self.assertEqual(report["ranks"][1]["status"], "no_leak")
        with open(os.path.join(self.folder, "job", "merged.html")) as file:
            page = file.read()
        self.assertIn("Ranks of the job", page)
        self.assertIn("autograd-graph-retained", page)
        # Each rank's number links to its own page beside it.
        for rank in (0, 1):
            self.assertIn(f'<a href="rank-{rank}.html"', page)
            self.assertTrue(os.path.exists(os.path.join(self.folder, "job", f"rank-{rank}.html")))
        # memseal merge reads the folder back to the same view, with check's exit codes; its page,
        # written in another folder, links the rank pages from there.
        views = os.path.join(self.folder, "views")
        os.mkdir(views)
        again = subprocess.run([ARGS.memseal, "merge", os.path.join(self.folder, "job"), "--html",
                                os.path.join(views, "merged.html")],
                               capture_output=True, text=True, timeout=120)
        self.assertEqual(again.returncode, 1, again.stderr)
        self.assertIn("rank 0 only", again.stdout)
        with open(os.path.join(views, "merged.html")) as file:
            self.assertIn('<a href="../job/rank-1.html"', file.read())

    def test_a_leak_of_every_rank_of_four_is_one_finding(self):
        code, out, err = job(self.folder, 4, "--leak", "all", "--batch", "8")
        self.assertEqual(code, 0, err)
        self.assertEqual(out.count(": done"), 4, err)
        report = merged(self.folder)
        self.assertEqual(report["world_size"], 4)
        self.assertEqual(len(report["findings"]), 1, err)
        self.assertEqual(report["findings"][0]["ranks"], [0, 1, 2, 3])
        self.assertTrue(report["findings"][0]["holders"][0].startswith("tensor `total_loss`"),
                        report["findings"][0]["holders"])
        self.assertIn("all 4 ranks", err)

    def test_uneven_batches_show_the_spread_of_the_peaks(self):
        code, _, err = job(self.folder, 2, "--uneven", "--batch", "256")
        self.assertEqual(code, 0, err)
        report = merged(self.folder)
        peaks = [rank["peak_live_bytes"] for rank in report["ranks"]]
        self.assertGreater(peaks[1], peaks[0], err)
        self.assertIn("rank 1 highest", err)

    def test_a_killed_rank_gives_its_latest_report_and_the_others_are_kept(self):
        # Killed with SIGKILL at its step 30: it wrote no final report, but memseal streamed its
        # latest while it ran.
        code, _, err = job(self.folder, 2, "--kill-rank", "1", "--kill-at", "30")
        self.assertNotEqual(code, 0, err)  # torchrun's own status: a rank failed
        report = merged(self.folder)
        self.assertIn(report["ranks"][1]["status"], ("no_leak", "leak"), err)
        with open(os.path.join(self.folder, "job", "rank-1.json")) as file:
            notes = json.load(file)["notes"]
        self.assertTrue(any("ended before its final report" in note for note in notes), notes)
        self.assertIn(report["ranks"][0]["status"], ("no_leak", "leak"))
        self.assertTrue(os.path.exists(os.path.join(self.folder, "job", "rank-0.json")))
        self.assertNotIn("missing", err)

    def test_a_job_folder_that_holds_reports_is_refused_before_the_job_runs(self):
        os.makedirs(os.path.join(self.folder, "job"))
        with open(os.path.join(self.folder, "job", "rank-0.json"), "w") as file:
            file.write("{}")
        code, out, err = job(self.folder, 2)
        self.assertEqual(code, 2, err)
        self.assertIn("holds another run's reports", err)
        self.assertNotIn("done", out)
        with open(os.path.join(self.folder, "job", "rank-0.json")) as file:
            self.assertEqual(file.read(), "{}")


def rank_report(rank, run_id):
    """A memseal.check/1 report of `rank` of a job of two, with no finding."""
    return json.dumps({
        "schema": "memseal.check/1", "verdict": "no_leak", "steps": 10, "warmup": 2,
        "detected_at_step": None, "backward_ran": False, "findings": [],
        "per_step": [{"step": 0, "live_bytes": 64, "live_count": 1, "resident_bytes": 0,
                      "graph_nodes_alive": 0}],
        "rank": {"rank": rank, "local_rank": rank, "world_size": 2, "run_id": run_id}})


class Merge(unittest.TestCase):
    def test_reports_of_two_jobs_are_refused_unless_forced(self):
        with tempfile.TemporaryDirectory() as folder:
            for rank, run_id in ((0, "monday"), (1, "tuesday")):
                with open(os.path.join(folder, f"rank-{rank}.json"), "w") as file:
                    file.write(rank_report(rank, run_id))
            result = subprocess.run([ARGS.memseal, "merge", folder], capture_output=True, text=True)
            self.assertEqual(result.returncode, 2, result.stderr)
            self.assertIn("the reports are of 2 jobs (run id monday:", result.stderr)
            self.assertIn("--force", result.stderr)
            forced = subprocess.run([ARGS.memseal, "merge", "--force", folder],
                                    capture_output=True, text=True)
            self.assertEqual(forced.returncode, 0, forced.stderr)
            self.assertIn("merged anyway", forced.stderr)

    def test_unreadable_inputs_are_refused(self):
        with tempfile.TemporaryDirectory() as folder:
            result = subprocess.run([ARGS.memseal, "merge", folder], capture_output=True, text=True)
            self.assertEqual(result.returncode, 2)
            self.assertIn("no rank reports in it", result.stderr)
            bad = os.path.join(folder, "rank-0.json")
            with open(bad, "w") as file:
                file.write("not json")
            result = subprocess.run([ARGS.memseal, "merge", folder], capture_output=True, text=True)
            self.assertEqual(result.returncode, 2)
            self.assertIn("rank-0.json", result.stderr)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--memseal", required=True)
    parser.add_argument("--scripts", required=True)
    parser.add_argument("--python", required=True)
    ARGS, rest = parser.parse_known_args()
    unittest.main(argv=[sys.argv[0], "-v"] + rest)
