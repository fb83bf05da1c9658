"""`memseal run` when the program does not end well: it crashes (SIGSEGV), aborts, ends in _exit,
is killed with SIGKILL, execs a program that is not libtorch, forks many children that end at
once, forks until the process limit stops it, closes its stdout, exits while its threads still
allocate, or writes its reports on a full disk. Each time the
program's own exit status passes through, memseal never hangs, and a program that wrote no final
report still gets its latest one, streamed while it ran, marked as such.

The faulty programs synchronise on memseal itself, not on time: they train a leaking loop until
their own interim report (MEMSEAL_RUN_DIR/PID.interim.json, written by memseal's runtime) says
"leak", then fail as asked.
"""
import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import unittest

ARGS = None

PROGRAM = textwrap.dedent('''
    import ctypes, json, os, signal, sys, threading
    import torch

    how = sys.argv[1]
    torch.manual_seed(0)
    model = torch.nn.Linear(64, 64)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    interim = os.path.join(os.environ.get("MEMSEAL_RUN_DIR", "/nonexistent"),
                           f"{os.getpid()}.interim.json")
    kept = []

    def leaked_yet():
        try:
            with open(interim) as source:
                return json.load(source)["verdict"] == "leak"
        except (OSError, ValueError, KeyError):
            return False

    def train_step():
        loss = model(torch.randn(32, 64)).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        kept.append(model(torch.randn(32, 64)))  # the leak: outputs kept, with their graphs

    for step in range(2000):
        train_step()
        if step % 20 == 0 and leaked_yet():
            break
    else:
        sys.exit("memseal wrote no interim report that says leak")
    print("leak reported while running", flush=True)
    if how == "segv":
        ctypes.string_at(0)
    elif how == "abort":
        os.abort()
    elif how == "exit":
        os._exit(7)
    elif how == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    elif how == "close-stdout":
        os.close(1)
        for _ in range(50):
            train_step()
    elif how == "exec":
        os.execv("/bin/sh", ["sh", "-c", "exit 4"])  # a program that is not libtorch takes over
    elif how == "forks":
        # Many children that end at once (a fork bomb held by the loop's bound): none can report.
        children = [pid for pid in (os.fork() for _ in range(40)) if pid != 0 or os._exit(0)]
        for child in children:
            os.waitpid(child, 0)
        sys.exit(3)
    elif how == "fork-bomb":
        # Every process forks two children, which do the same, until fork() fails (the process
        # limit the test sets; 12 generations at most); then each waits for its children.
        def fork_until_the_limit(generation):
            children, limit_reached = [], False
            while len(children) < 2 and generation < 12:
                try:
                    pid = os.fork()
                except OSError:  # EAGAIN: no process left under the limit
                    limit_reached = True
                    break
                if pid == 0:
                    generation, children = generation + 1, []
                    continue
                children.append(pid)
            healthy = True
            for child in children:
                _, status = os.waitpid(child, 0)
                healthy = healthy and os.waitstatus_to_exitcode(status) in (0, 8)
                limit_reached = limit_reached or os.waitstatus_to_exitcode(status) == 8
            return healthy, limit_reached, generation
        healthy, limit_reached, generation = fork_until_the_limit(0)
        if generation > 0:
            os._exit(8 if limit_reached and healthy else 0 if healthy else 1)
        print("the process limit was reached" if limit_reached else "no fork failed", flush=True)
        sys.exit(3 if healthy else 1)
    elif how == "threads":
        # Still allocating as the program exits: Python joins them after main ends. (Daemon
        # threads inside torch abort at exit with or without memseal.)
        stop = threading.Event()
        def allocate_until_stopped():
            while not stop.is_set():
                torch.ones(256).sum()
        for _ in range(2):
            threading.Thread(target=allocate_until_stopped).start()
        stop.set()
        sys.exit(5)
''')


class ProcessLimit:
    """At most `count` more processes (and threads) for what `enter` starts: a pids cgroup of its
    own where this test may make one (root), else RLIMIT_NPROC above the processes running now
    (which does not bind root). `enter` is None, with `why_not`, where neither holds."""

    def __init__(self, count):
        self.count, self.group, self.enter, self.why_not = count, None, None, ""

    def __enter__(self):
        for root in ("/sys/fs/cgroup/pids", "/sys/fs/cgroup"):
            group = os.path.join(root, f"memseal-faults-{os.getpid()}")
            try:
                os.mkdir(group)
            except OSError:
                continue
            if not os.path.exists(os.path.join(group, "pids.max")):
                os.rmdir(group)
                continue
            with open(os.path.join(group, "pids.max"), "w") as limit:
                limit.write(str(self.count))
            self.group = group
            procs = os.path.join(group, "cgroup.procs")
            def join_the_group():
                with open(procs, "w") as members:
                    members.write(str(os.getpid()))
            self.enter = join_the_group
            return self
        if os.geteuid() != 0:
            import resource
            running = len([name for name in os.listdir("/proc") if name.isdigit()])
            limit = running + self.count
            self.enter = lambda: resource.setrlimit(resource.RLIMIT_NPROC, (limit, limit))
            return self
        self.why_not = "no pids cgroup could be made, and RLIMIT_NPROC does not bind root"
        return self

    def __exit__(self, *exception):
        if self.group is None:
            return
        # Every process of a passing run has ended; a failed one may leave some behind.
        with open(os.path.join(self.group, "cgroup.procs")) as members:
            for pid in members.read().split():
                os.kill(int(pid), signal.SIGKILL)
        try:
            os.rmdir(self.group)
        except OSError as error:
            print(f"note: {self.group} not removed: {error}", file=sys.stderr)


class FullDisk:
    """A file system of 256 KiB, filled to the last block, at `path` (a tmpfs: root may mount
    one; `path` is None, with `why_not`, where that is refused)."""

    def __enter__(self):
        self.folder = tempfile.TemporaryDirectory()
        self.path, self.why_not = None, ""
        mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs",
                                  self.folder.name], capture_output=True, text=True)
        if mounted.returncode != 0:
            self.why_not = "cannot mount a small file system here: " + mounted.stderr.strip()
            return self
        self.path = self.folder.name
        with open(os.path.join(self.path, "report.json"), "w") as earlier:
            earlier.write('{"an earlier report": true}')
        os.mkdir(os.path.join(self.path, "tmp"))
        filler = os.open(os.path.join(self.path, "filler"), os.O_WRONLY | os.O_CREAT)
        try:
            while os.write(filler, b"\0" * 4096) > 0:
                pass
        except OSError:  # ENOSPC: full
            pass
        finally:
            os.close(filler)
        return self

    def __exit__(self, *exception):
        if self.path is not None:
            subprocess.run(["umount", self.path], check=True)
        self.folder.cleanup()


class Faults(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.folder = tempfile.TemporaryDirectory()
        cls.program = os.path.join(cls.folder.name, "faulty_training.py")
        with open(cls.program, "w") as file:
            file.write(PROGRAM)

    @classmethod
    def tearDownClass(cls):
        cls.folder.cleanup()

    def run_faulty(self, how, *options):
        result = subprocess.run([ARGS.memseal, "run", *options, "--", ARGS.python, self.program,
                                 how], capture_output=True, text=True, timeout=600)
        self.assertNotIn("memseal wrote no interim report", result.stderr)
        return result

    def assert_latest_report_given(self, result):
        self.assertIn("ended before its final report (a crash, a kill or _exit): this is its "
                      "latest report", result.stderr)
        self.assertIn("LEAK", result.stderr)

    def test_a_crash_passes_its_signal_through_and_leaves_the_latest_report(self):
        for how, number in (("segv", signal.SIGSEGV), ("abort", signal.SIGABRT),
                            ("kill", signal.SIGKILL)):
            with self.subTest(how=how):
                result = self.run_faulty(how)
                self.assertEqual(result.returncode, -number, result.stderr)
                self.assertIn(f"killed by signal {int(number)}", result.stderr)
                self.assert_latest_report_given(result)

    def test_underscore_exit_passes_its_status_and_the_json_is_the_latest_report(self):
        with tempfile.TemporaryDirectory() as folder:
            path = os.path.join(folder, "report.json")
            result = self.run_faulty("exit", "--json", path)
            self.assertEqual(result.returncode, 7, result.stderr)
            self.assertIn("exit status 7", result.stderr)
            self.assert_latest_report_given(result)
            with open(path) as source:
                report = json.load(source)
            self.assertEqual(report["verdict"], "leak")
            self.assertTrue(any("latest report" in note for note in report["notes"]), report)

    def test_a_program_that_execs_another_passes_its_status_and_leaves_the_latest_report(self):
        result = self.run_faulty("exec")
        self.assertEqual(result.returncode, 4, result.stderr)
        self.assertIn("exit status 4", result.stderr)
        self.assert_latest_report_given(result)

    def test_many_children_without_reports_are_one_line_after_the_programs_report(self):
        result = self.run_faulty("forks", "--follow-fork")
        self.assertEqual(result.returncode, 3, result.stderr)
        self.assertIn("LEAK", result.stderr)
        self.assertIn("40 child processes ended before memseal could write their reports",
                      result.stderr)
        self.assertNotIn("memseal run: child pid", result.stderr)  # none named one by one
        self.assertLess(len(result.stderr.splitlines()), 80, result.stderr)

    def test_a_fork_bomb_held_by_the_process_limit_passes_its_status_through(self):
        with ProcessLimit(96) as limit:
            if limit.enter is None:
                self.skipTest(limit.why_not)
            result = subprocess.run([ARGS.memseal, "run", "--follow-fork", "--", ARGS.python,
                                     self.program, "fork-bomb"], capture_output=True, text=True,
                                    timeout=600, preexec_fn=limit.enter)
        # Every process the limit let start ended well: none crashed because memseal could not
        # start its thread in it, and memseal's launcher neither hung nor failed.
        self.assertEqual(result.returncode, 3, result.stdout + result.stderr)
        self.assertIn("the process limit was reached", result.stdout)
        self.assertIn("exit status 3", result.stderr)
        self.assertIn("LEAK", result.stderr)
        self.assertIn("child processes ended before memseal could write their reports",
                      result.stderr)
        self.assertLess(len(result.stderr.splitlines()), 80, result.stderr)

    def test_a_full_disk_loses_no_report_and_no_earlier_file(self):
        with FullDisk() as disk:
            if disk.path is None:
                self.skipTest(disk.why_not)
            json_path = os.path.join(disk.path, "report.json")
            # The report files asked for, on the full disk.
            result = self.run_faulty("close-stdout", "--json", json_path, "--html",
                                     os.path.join(disk.path, "report.html"))
            self.assertEqual(result.returncode, 2, result.stderr)  # the outputs failed
            self.assertIn(f"cannot write {json_path}.tmp: No space left on device", result.stderr)
            self.assertIn("LEAK", result.stderr)  # the text report still said
            with open(json_path) as earlier:
                self.assertEqual(earlier.read(), '{"an earlier report": true}')
            self.assertEqual(sorted(os.listdir(disk.path)), ["filler", "report.json", "tmp"])
            # The run's own folder on the full disk (TMPDIR): the program says its report itself.
            result = subprocess.run([ARGS.memseal, "run", "--", ARGS.python, self.program,
                                     "close-stdout"], capture_output=True, text=True, timeout=600,
                                    env=dict(os.environ, TMPDIR=os.path.join(disk.path, "tmp")))
            self.assertEqual(result.returncode, 2, result.stderr)
            self.assertIn("No space left on device", result.stderr)
            self.assertIn("not written to", result.stderr)
            self.assertIn("LEAK", result.stderr)
            self.assertIn("has no space left", result.stderr)
            self.assertNotIn("never loaded libtorch", result.stderr)

    def test_a_program_that_closes_stdout_ends_cleanly_with_its_final_report(self):
        result = self.run_faulty("close-stdout")
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("LEAK", result.stderr)
        self.assertNotIn("latest report", result.stderr)  # it wrote its final one

    def test_threads_still_allocating_at_exit_do_not_change_the_status(self):
        result = self.run_faulty("threads")
        self.assertEqual(result.returncode, 5, result.stderr)
        self.assertIn("exit status 5", result.stderr)
        self.assertIn("LEAK", result.stderr)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--memseal", required=True)
    parser.add_argument("--python", required=True)
    ARGS, rest = parser.parse_known_args()
    unittest.main(argv=[sys.argv[0], *rest], verbosity=2)
