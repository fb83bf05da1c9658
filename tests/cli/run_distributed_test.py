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
import socket
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


def free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def two_nodes(folder, *script_args, gather=()):
    """A job of two machines played by two torchrun agents on this one (--nnodes 2, a c10d
    rendezvous on 127.0.0.1, one rank each), each under its own memseal run in its own folder, as
    on two machines without a shared file system. Both folders, [(exit status, stderr)] of each."""
    port, run_id = free_port(), f"nodes-{os.getpid()}"
    nodes = []
    for name in ("first", "second"):
        where = os.path.join(folder, name)
        os.makedirs(where)
        command = [ARGS.memseal, "run", "--job-dir", "job", *gather, "--",
                   ARGS.python, "-m", "torch.distributed.run", "--nnodes", "2",
                   "--nproc-per-node", "1", "--rdzv-backend", "c10d",
                   "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", run_id,
                   os.path.join(ARGS.scripts, "ddp_train.py"), "--steps", "120", *script_args]
        nodes.append((where, subprocess.Popen(command, cwd=where, stdout=subprocess.PIPE,
                                              stderr=subprocess.PIPE, text=True,
                                              env=dict(os.environ, OMP_NUM_THREADS="1"))))
    results = []
    for where, process in nodes:
        _, err = process.communicate(timeout=600)
        results.append((where, process.returncode, err))
    return results


def merged_in(where):
    with open(os.path.join(where, "job", "merged.json")) as file:
        return json.load(file)


class JobAcrossMachines(unittest.TestCase):
    def setUp(self):
        self.folder = tempfile.mkdtemp()

    def node_of_rank_0(self, results):
        """The results of the node whose merged view has rank 0's own report, then the other's."""
        zero = [r for r in results if merged_in(r[0])["ranks"][0]["status"] != "missing"]
        self.assertEqual(len(zero), 1, [r[2][-3000:] for r in results])
        other = [r for r in results if r is not zero[0]]
        return zero[0], other[0]

    def test_the_node_of_rank_0_merges_the_other_nodes_ranks(self):
        # The last rank (node 1's) keeps its losses; rank 0 does not.
        results = two_nodes(self.folder, "--leak", "last")
        (zero, zero_code, zero_err), (one, one_code, one_err) = self.node_of_rank_0(results)
        self.assertEqual((zero_code, one_code), (0, 0), zero_err + one_err)
        report = merged_in(zero)
        self.assertEqual([r["status"] for r in report["ranks"]], ["no_leak", "leak"], zero_err)
        self.assertEqual([r["node"] for r in report["ranks"]], [0, 1], zero_err)
        self.assertIn(" on ", report["ranks"][1]["source"])  # the machine it ran on
        self.assertEqual(len(report["findings"]), 1, zero_err)
        self.assertEqual(report["findings"][0]["ranks"], [1], zero_err)
        self.assertEqual(report["findings"][0]["category"], "autograd-graph-retained")
        self.assertIn("rank 1 (node 1): LEAK", zero_err)
        # The other node's rank, its page and report written on the node of rank 0 too.
        with open(os.path.join(zero, "job", "rank-1.json")) as file:
            self.assertEqual(json.load(file)["rank"]["node"], 1)
        with open(os.path.join(zero, "job", "merged.html")) as file:
            self.assertIn('href="rank-1.html"', file.read())
        # The other node keeps its own rank's report, and says where the whole job is.
        local = merged_in(one)
        self.assertEqual([r["status"] for r in local["ranks"]], ["missing", "leak"], one_err)
        self.assertIn("the memseal of rank 0's node gathers", local["ranks"][0]["missing_reason"])
        self.assertNotIn("node", local["ranks"][0])  # not known from there
        self.assertTrue(os.path.exists(os.path.join(one, "job", "rank-1.json")))

    def test_a_rank_of_another_node_that_never_reports_is_missing_with_why(self):
        # Rank 1 is killed (SIGKILL) at its step 30: no final report to send. Rank 0 fails in its
        # next collective, ends, and waits 5 s for rank 1's report.
        results = two_nodes(self.folder, "--kill-rank", "1", "--kill-at", "30",
                            gather=("--gather-timeout", "5"))
        (zero, zero_code, zero_err), (one, _, one_err) = self.node_of_rank_0(results)
        self.assertNotEqual(zero_code, 0, zero_err)  # torchrun's own status: a rank failed
        rank_1 = merged_in(zero)["ranks"][1]
        self.assertEqual(rank_1["status"], "missing", zero_err)
        self.assertTrue(rank_1["missing_reason"].startswith(("no report came from it",
                                                             "rank 0 could not reach")),
                        rank_1["missing_reason"])
        # Its own node still has its latest streamed report.
        self.assertEqual(merged_in(one)["ranks"][1]["status"] != "missing", True, one_err)

    def test_a_node_started_without_memseal_is_said_so_and_not_waited_for(self):
        # A static rendezvous (--node-rank honoured): node 0 under memseal run, node 1 without.
        port = free_port()
        nodes = []
        for node, traced in ((0, True), (1, False)):
            where = os.path.join(self.folder, f"node{node}")
            os.makedirs(where)
            torchrun = [ARGS.python, "-m", "torch.distributed.run", "--nnodes", "2",
                        "--nproc-per-node", "1", "--node-rank", str(node),
                        "--master-addr", "127.0.0.1", "--master-port", str(port),
                        os.path.join(ARGS.scripts, "ddp_train.py"), "--steps", "60"]
            command = [ARGS.memseal, "run", "--job-dir", "job", "--"] + torchrun if traced \
                else torchrun
            nodes.append((where, subprocess.Popen(command, cwd=where, stdout=subprocess.PIPE,
                                                  stderr=subprocess.PIPE, text=True,
                                                  env=dict(os.environ, OMP_NUM_THREADS="1"))))
        errs = [process.communicate(timeout=600)[1] for _, process in nodes]
        self.assertEqual([process.returncode for _, process in nodes], [0, 0], errs)
        rank_1 = merged_in(nodes[0][0])["ranks"][1]
        self.assertEqual(rank_1["status"], "missing", errs[0])
        self.assertTrue(rank_1["missing_reason"].startswith("memseal did not run in it"),
                        rank_1["missing_reason"])

    def test_a_gather_timeout_that_is_not_a_number_is_refused(self):
        result = subprocess.run([ARGS.memseal, "run", "--gather-timeout", "soon", "--",
                                 ARGS.python, "-c", "pass"], capture_output=True, text=True)
        self.assertEqual(result.returncode, 2, result.stderr)
        self.assertIn("--gather-timeout", result.stderr)


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
