"""`memseal run` as users run it: an unmodified server binary and Python scripts, leaky and healthy,
signals and exit codes passed through, children followed, and every bad input refused.

Synchronisation is by pipes: a test that needs the program busy reads the program's own output
("served N") before it sends a signal, and reads memseal's stderr for what it waits for.
"""
import argparse
import fcntl
import json
import os
import re
import select
import signal
import struct
import subprocess
import sys
import tempfile
import termios
import time
import unittest

ARGS = None


def run(*command, stdin_text=None, timeout=300, env=None):
    """memseal run ARGS...: (exit status, stdout, stderr). `env`: variables added to ours."""
    result = subprocess.run([ARGS.memseal, "run", *command], input=stdin_text, text=True,
                            capture_output=True, timeout=timeout,
                            env=None if env is None else {**os.environ, **env})
    return result.returncode, result.stdout, result.stderr


def run_script(name, source, *flags, env=None):
    """memseal run FLAGS... -- python NAME, NAME holding `source`: (exit status, stdout, stderr)."""
    with tempfile.TemporaryDirectory() as folder:
        script = os.path.join(folder, name)
        with open(script, "w") as file:
            file.write(source)
        return run(*flags, "--", ARGS.python, script, env=env)


# A loop that keeps every output (line 5), then lets them all go as the program ends (as main's
# locals go) and writes its results without tensors.
KEEPS_THEN_FREES_AS_IT_ENDS = ("import time\nimport torch\nkept = []\n"
                               "for _ in range(600):\n"
                               "    kept.append(torch.ones(256) * 2)\n"
                               "    time.sleep(0.002)\n"
                               "kept.clear()\n"
                               "time.sleep(0.05)\n")


class Server(unittest.TestCase):
    """The example server: no memseal code in it, requests made by itself or read from stdin."""

    def test_a_leaking_server_is_found_with_the_category_and_op_check_gives(self):
        code, out, err = run("--", ARGS.server, "--requests", "3000", "--leak", "history")
        self.assertEqual(code, 0, err)
        self.assertEqual(out.count("response "), 3000)
        self.assertIn("LEAK", err)
        self.assertIn("tensors-retained", err)
        self.assertIn("made by   aten::_softmax (inside aten::softmax)", err)
        self.assertIn("inference_server.cpp", err)  # the server's own line, from its stack
        # The loop was found from the ops: no flag needed, and the report says so.
        self.assertIn("one step per call of", err)

    def test_grad_enabled_inference_is_named(self):
        code, _, err = run("--", ARGS.server, "--requests", "2000", "--leak", "grad")
        self.assertEqual(code, 0, err)
        self.assertIn("grad-enabled-inference", err)

    def test_a_healthy_server_under_steady_load_is_not_flagged(self):
        for workers in ("1", "2"):
            with self.subTest(workers=workers):
                code, out, err = run("--", ARGS.server, "--requests", "3000", "--workers", workers)
                self.assertEqual(code, 0, err)
                self.assertEqual(out.count("response "), 3000)
                self.assertIn("memseal: no leak", err)
                self.assertNotIn("LEAK", err)

    def test_a_loop_of_long_iterations_keeps_its_steps_counted(self):
        # Requests of about half a millisecond (1024-wide layers): one iteration a counted step.
        # Each check that the anchor still starts an iteration puts the op callback back for a few
        # iterations, which changes the native stack of the step's first allocation; counting must
        # hold through the checks rather than stop at each one (half the steps followed by ops).
        code, _, err = run("--", ARGS.server, "--requests", "1500", "--hidden", "1024")
        self.assertEqual(code, 0, err)
        steps = re.search(r"steps: (\d+) steps? in 1 loop found", err)
        counted = re.search(r"(\d+) of these steps were ended by counting", err)
        self.assertIsNotNone(steps, err)
        self.assertIsNotNone(counted, err)
        self.assertGreaterEqual(int(counted.group(1)), 0.85 * int(steps.group(1)), err)

    def test_stdin_stdout_and_exit_status_pass_through(self):
        code, out, err = run(ARGS.server, "--exit-code", "3", stdin_text="4\n2\n")
        self.assertEqual(code, 3, err)
        self.assertEqual(out.splitlines(), [line for line in out.splitlines() if line])
        self.assertRegex(out, r"response 1 batch 4 ")
        self.assertRegex(out, r"response 2 batch 2 ")
        self.assertIn("exit status 3", err)

    def test_the_servers_timing_blocks_pass_through_for_the_overhead_benchmark(self):
        # bench/run_overhead.sh reads the request loop's time and each block's from the server's
        # stderr under `memseal run`: one line per block of N requests, after the loop's own.
        code, _, err = run("--", ARGS.server, "--requests", "60", "--timing", "1",
                           "--timing-blocks", "20")
        self.assertEqual(code, 0, err)
        loop = re.findall(r"^request loop: 60 requests in ([\d.]+) ms$", err, re.M)
        blocks = re.findall(r"^request block: 20 requests in ([\d.]+) ms$", err, re.M)
        self.assertEqual(len(loop), 1, err)
        self.assertEqual(len(blocks), 3, err)
        self.assertLessEqual(sum(map(float, blocks)), float(loop[0]) + 0.1, err)
        refused = subprocess.run([ARGS.server, "--timing-blocks", "0"], capture_output=True,
                                 text=True, timeout=60)
        self.assertEqual(refused.returncode, 2)
        self.assertIn("--timing-blocks needs a positive number of requests", refused.stderr)

    def test_fail_on_leak_turns_a_clean_exit_into_1(self):
        code, _, _ = run("--fail-on-leak", "--", ARGS.server, "--requests", "3000", "--leak",
                         "history")
        self.assertEqual(code, 1)
        code, _, err = run("--fail-on-leak", "--", ARGS.server, "--requests", "1000")
        self.assertEqual(code, 0, err)

    def test_step_on_and_interval_choose_the_steps(self):
        code, _, err = run("--step-on", "aten::max", "--", ARGS.server, "--requests", "3000",
                           "--leak", "history")
        self.assertEqual(code, 0, err)
        self.assertIn("one step per outermost call of aten::max (--step-on)", err)
        self.assertIn("tensors-retained", err)
        # Windows short enough that even a fast machine serves the requests over 20 or more of
        # them (6,000 requests in 20 ms windows gave only 10, 5 of them warm-up, on one machine).
        code, _, err = run("--interval", "5ms", "--", ARGS.server, "--requests", "20000",
                           "--leak", "history")
        self.assertEqual(code, 0, err)
        self.assertIn("time windows of 5 ms (--interval)", err)
        self.assertIn("tensors-retained", err)

    def test_step_on_takes_a_memseal_scope_of_a_program_linked_to_libmemseal(self):
        code, out, err = run("--step-on", "request", "--", ARGS.scoped_loop)
        self.assertEqual(code, 0, err)
        self.assertEqual(out, "kept 4000\n")
        self.assertIn("one step per outermost call of request (--step-on)", err)
        self.assertIn("tensors-retained", err)
        self.assertNotIn("(0 steps)", err)

    def test_json_html_and_output_files(self):
        with tempfile.TemporaryDirectory() as folder:
            json_path = os.path.join(folder, "run.json")
            html_path = os.path.join(folder, "run.html")
            text_path = os.path.join(folder, "run.txt")
            code, out, err = run("--json", json_path, "--html", html_path, "--output", text_path,
                                 "--", ARGS.server, "--requests", "3000", "--leak", "history")
            self.assertEqual(code, 0, err)
            self.assertNotIn("LEAK", err)  # the text went to --output
            with open(text_path, encoding="utf-8") as text:
                self.assertIn("tensors-retained", text.read())
            with open(json_path, encoding="utf-8") as source:
                report = json.load(source)
            self.assertEqual(report["schema"], "memseal.check/1")
            self.assertEqual(report["verdict"], "leak")
            self.assertEqual(report["findings"][0]["category"], "tensors-retained")
            # Where the steps came from, in a field of its own.
            self.assertTrue(any("one step per call of" in line for line in report["steps_from"]),
                            report)
            with open(html_path, encoding="utf-8") as page:
                html = page.read()
            self.assertIn("tensors-retained", html)
            self.assertNotIn("<script src=", html)


class Signals(unittest.TestCase):
    """A server reading requests from stdin: busy until stdin closes."""

    def start(self, *flags, new_session=False):
        process = subprocess.Popen([ARGS.memseal, "run", *flags, "--", ARGS.server, "--announce",
                                    "200", "--leak", "history"],
                                   stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, text=True, bufsize=1,
                                   start_new_session=new_session)
        self.addCleanup(self.stop, process)
        return process

    @staticmethod
    def stop(process):
        if process.poll() is None:
            process.kill()
            process.wait()
        for stream in (process.stdin, process.stdout, process.stderr):
            stream.close()

    def serve(self, process, requests):
        """Sends requests and waits until the server says it has served them."""
        for i in range(requests):
            process.stdin.write(f"{1 + i % 8}\n")
        process.stdin.flush()
        for line in process.stdout:
            if line.startswith(f"served {requests}"):
                return
        self.fail("the server stopped before serving its requests")

    def test_sigusr1_prints_a_report_while_the_program_runs(self):
        process = self.start()
        self.serve(process, 2000)
        process.send_signal(signal.SIGUSR1)  # to memseal, which passes it on
        for line in process.stderr:
            if "while it runs" in line:
                break
        else:
            self.fail("no report on SIGUSR1")
        process.stdin.close()
        process.stdout.read()
        rest = process.stderr.read()
        self.assertEqual(process.wait(), 0)
        self.assertIn("exit status 0", rest)

    def test_sigterm_writes_the_report_and_ends_the_program_as_sigterm_would(self):
        process = self.start()
        self.serve(process, 2000)
        process.send_signal(signal.SIGTERM)
        # stdin stays open: the server must end by the signal, not by the end of its input.
        process.wait(timeout=120)
        err = process.stderr.read()
        self.assertEqual(process.returncode, -signal.SIGTERM, err)
        self.assertIn("killed by signal 15", err)
        self.assertIn("tensors-retained", err)

    def test_ctrl_c_reaches_the_program_and_the_report_is_written(self):
        process = self.start(new_session=True)
        self.serve(process, 2000)
        os.killpg(process.pid, signal.SIGINT)  # as a terminal does: the whole process group
        process.wait(timeout=120)
        err = process.stderr.read()
        self.assertEqual(process.returncode, -signal.SIGINT, err)
        self.assertIn("killed by signal 2", err)
        self.assertIn("tensors-retained", err)


class Python(unittest.TestCase):
    def test_a_leaking_training_script_is_reported_with_its_python_line(self):
        script = os.path.join(ARGS.scripts, "train.py")
        code, out, err = run("--", ARGS.python, script, "--leak", "total-loss", "--exit-code", "4")
        self.assertEqual(code, 4, err)
        self.assertIn("mean loss", out)
        self.assertIn("autograd-graph-retained", err)
        self.assertRegex(err, r"train\.py:\d+")

    def test_tensors_still_kept_as_python_ends_are_reported_with_their_python_line(self):
        # The kept list outlives the interpreter's teardown, so the report at exit, made after
        # Python has finalised (no frame can be read then), still holds the leak. 2,000 iterations:
        # iterations closer together than a step costs are one step, and on a loaded machine 300
        # of them came to 7 steps, too few past warm-up for a verdict.
        code, _, err = run_script("immortal.py",
                                  "import ctypes\nimport torch\nkept = []\n"
                                  "ctypes.pythonapi.Py_IncRef(ctypes.py_object(kept))\n"
                                  "w = torch.randn(64, 64)\n"
                                  "for i in range(2000):\n"
                                  "    kept.append(torch.relu(torch.randn(16, 64) @ w))\n")
        self.assertEqual(code, 0, err)
        self.assertIn("tensors-retained", err)
        self.assertRegex(err, r"immortal\.py:7\b")

    def test_the_container_that_keeps_a_leak_is_named_as_check_names_it(self):
        # The list is a local of the function running the loop: found while the loop runs (a
        # search at exit would find it gone), in the text, and in the JSON as `check` writes it.
        # 20,000 iterations: reports at step boundaries come 100 ms or more apart, and one must
        # come after the verdict while the loop still runs.
        with tempfile.TemporaryDirectory() as folder:
            path = os.path.join(folder, "report.json")
            code, _, err = run_script("keeps_outputs.py",
                                      "import torch\n"
                                      "def train():\n"
                                      "    outputs = []\n"
                                      "    w = torch.randn(64, 64)\n"
                                      "    for i in range(20000):\n"
                                      "        outputs.append(torch.relu(torch.randn(16, 64) @ w))\n"
                                      "train()\n", "--json", path)
            with open(path, encoding="utf-8") as file:
                report = json.load(file)
        self.assertEqual(code, 0, err)
        self.assertEqual(report["findings"][0]["category"], "tensors-retained", err)
        holders = report["python"]["holders"]
        self.assertEqual(holders[0]["finding"], 0, holders)
        self.assertTrue(holders[0]["description"].startswith("list `outputs` (local of train"),
                        holders)
        self.assertEqual(holders[0]["kind"], "local", holders)
        self.assertRegex(err, r"kept by +list `outputs` \(local of train \(keeps_outputs\.py:\d+\)")

    def test_a_running_total_that_keeps_its_graph_is_named_with_the_graph_it_keeps(self):
        code, _, err = run("--", ARGS.python, os.path.join(ARGS.scripts, "train.py"),
                           "--leak", "total-loss", "--steps", "2000")
        self.assertEqual(code, 0, err)
        self.assertIn("autograd-graph-retained", err)
        # One finding per cause: the resident memory the graphs cost is theirs.
        self.assertNotIn("untracked-growth", err)
        self.assertRegex(err, r"kept by +tensor `total_loss` \(local of main \(train\.py:\d+\)\), "
                              r"whose grad_fn AddBackward0 keeps \d+\s+autograd nodes alive")

    def test_a_frameworks_frames_in_site_packages_are_folded_and_the_users_line_named(self):
        # A package where pip puts transformers or Lightning (the environment's site-packages,
        # beside torch) makes the kept tensor; the finding names the script's line that called it.
        purelib = subprocess.run(
            [ARGS.python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True, text=True, check=True).stdout.strip()
        name = f"memseal_test_framework_{os.getpid()}"
        framework = os.path.join(purelib, name + ".py")
        with open(framework, "w") as file:
            file.write("def scaled(x):\n    return x * 2\n")
        try:
            code, _, err = run_script("user_loop.py",
                                      f"import torch\nimport {name} as framework\nkept = []\n"
                                      "w = torch.randn(64, 64)\n"
                                      "for i in range(2000):\n"
                                      "    kept.append(framework.scaled(torch.randn(16, 64) @ w))\n")
        finally:
            os.remove(framework)
        self.assertEqual(code, 0, err)
        self.assertIn("tensors-retained", err)
        self.assertRegex(err, r"user_loop\.py:6\b")
        self.assertNotRegex(err, name + r"\.py:\d+")

    def test_memory_viz_writes_the_runs_allocations_for_torchs_viewer(self):
        with tempfile.TemporaryDirectory() as folder:
            viz = os.path.join(folder, "train.pickle")
            code, _, err = run("--memory-viz", viz, "--", ARGS.python,
                               os.path.join(ARGS.scripts, "train.py"), "--steps", "100")
            self.assertEqual(code, 0, err)
            self.assertIn("memory_viz trace of pid ", err)
            self.assertIn(f"-> {viz}", err)
            # torch.cuda._memory_viz reads it: segsum, trace and the plots.
            check = subprocess.run([ARGS.python, ARGS.memory_viz_check, viz],
                                   capture_output=True, text=True, timeout=300)
            self.assertEqual(check.returncode, 0, check.stdout + check.stderr)

    def test_the_fixed_script_is_not_flagged(self):
        code, _, err = run("--", ARGS.python, os.path.join(ARGS.scripts, "train.py"))
        self.assertEqual(code, 0, err)
        self.assertIn("memseal: no leak", err)

    def test_time_windows_in_which_the_program_is_idle_are_no_steps(self):
        # 12 bursts of allocations, each followed by 100 ms of waiting (as on I/O): with 5 ms
        # windows, the waits alone would make some 240 empty steps.
        code, _, err = run_script("bursts.py",
                                  "import time\nimport torch\nkept = []\n"
                                  "for _ in range(12):\n"
                                  "    kept.append(torch.ones(256) * 2)\n"
                                  "    time.sleep(0.1)\n",
                                  "--interval", "5ms")
        self.assertEqual(code, 0, err)
        match = re.search(r"time windows of 5 ms \(--interval\) \((\d+) steps?\)", err)
        self.assertIsNotNone(match, err)
        self.assertLess(int(match.group(1)), 60, err)

    def test_a_loop_whose_end_frees_what_it_kept_is_still_a_leak_in_time_windows(self):
        # Every output is kept; the program lets them all go as it ends (as main's locals go) and
        # writes its results without tensors: with time windows, that end is a step of its own.
        code, _, err = run_script("ends.py", KEEPS_THEN_FREES_AS_IT_ENDS, "--interval", "5ms")
        self.assertEqual(code, 0, err)
        self.assertIn("tensors-retained", err)
        self.assertNotIn("held for a while, then freed", err)

    def test_such_a_loop_is_a_leak_however_few_reports_were_taken_while_it_ran(self):
        # A loaded machine makes reports slow, and their pause 20 times as long: the loop may end
        # before a report taken while it ran said leak. Here the pause is 100 times longer (10 s at
        # least), so the one report kept was taken in warm-up: the verdict at exit is the
        # detector's own, judged as of the step the loop ended at.
        code, _, err = run_script("ends_unreported.py", KEEPS_THEN_FREES_AS_IT_ENDS, "--interval",
                                  "5ms", env={"MEMSEAL_RUN_TIME_SCALE": "100"})
        self.assertEqual(code, 0, err)
        self.assertIn("tensors-retained", err)
        self.assertIn("ends_unreported.py:5", err)
        self.assertNotIn("held for a while, then freed", err)

    def test_a_slow_interpreter_teardown_after_such_a_loop_is_still_its_end(self):
        # As above, and the interpreter's own finalisation then takes many windows (a busy machine
        # does that; here an object's __del__): what follows the program's own code is teardown.
        code, _, err = run_script("ends_slowly.py",
                                  KEEPS_THEN_FREES_AS_IT_ENDS +
                                  "class SlowToFinalise:\n"
                                  "    def __del__(self):\n"
                                  "        for _ in range(20):\n"
                                  "            torch.ones(4)\n"
                                  "            time.sleep(0.006)\n"
                                  "slow = SlowToFinalise()\n",
                                  "--interval", "5ms")
        self.assertEqual(code, 0, err)
        self.assertIn("tensors-retained", err)
        self.assertNotIn("held for a while, then freed", err)

    def test_a_leak_in_a_long_loop_is_named_after_its_steps_are_counted(self):
        # Batches of changing size: the steps are counted, ops watched one step in 32 and the
        # others replayed with their shapes scaled; the finding keeps its op, line and shapes.
        code, _, err = run_script("kept.py",
                                  "import torch\nkept = []\nweight = torch.randn(64, 64)\n"
                                  "for step in range(3000):\n"
                                  "    batch = torch.randn(1 + step % 8, 64)\n"
                                  "    kept.append(torch.relu(batch @ weight))  # leak\n"
                                  "print(len(kept))\n")
        self.assertEqual(code, 0, err)
        self.assertIn("ended by counting the loop's allocations", err)
        self.assertIn("tensors-retained", err)
        self.assertIn("made by   aten::clamp_min (inside aten::relu)", err)
        self.assertIn("kept.py:6", err)
        self.assertIn("[1..8, 64] (8 distinct shapes)", err)

    def test_a_phase_that_allocates_nothing_after_a_counted_loop_is_still_seen(self):
        # After the counted loop, in-place ops only: no allocation ends a counted step, so memseal
        # follows the ops again after a quiet second and finds the second loop.
        code, _, err = run_script("quiet.py",
                                  "import time\nimport torch\nweight = torch.randn(32, 32)\n"
                                  "for _ in range(2000):\n"
                                  "    torch.relu(torch.randn(4, 32) @ weight).sum().item()\n"
                                  "state, half = torch.ones(64), torch.full((64,), 0.5)\n"
                                  "started = time.monotonic()\n"
                                  "while time.monotonic() - started < 3:\n"
                                  "    state.mul_(half)\n"
                                  "    state.add_(half)\n")
        self.assertEqual(code, 0, err)
        self.assertIn("ended by counting the loop's allocations", err)
        self.assertIn("2 loops found", err)

def start_in_terminal(*command):
    """memseal run COMMAND... with stdin, stdout and stderr on a pseudo-terminal of 24 rows:
    (process, the terminal's master side)."""
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 120, 0, 0))
    process = subprocess.Popen([ARGS.memseal, "run", *command], stdin=slave, stdout=slave,
                               stderr=slave, env=dict(os.environ, TERM="xterm"), close_fds=True)
    os.close(slave)
    return process, master


def read_terminal(master, until=None, timeout=120):
    """What the program and memseal wrote to the terminal: up to the end, or until `until(text)`."""
    text = b""
    deadline = time.monotonic() + timeout
    while until is None or not until(text):
        ready, _, _ = select.select([master], [], [], max(0.0, deadline - time.monotonic()))
        if not ready:
            raise AssertionError(f"timed out; the terminal showed {text[-2000:]!r}")
        try:
            chunk = os.read(master, 65536)
        except OSError:  # the last process holding the terminal ended
            break
        if not chunk:
            break
        text += chunk
    return text


PROGRESS = re.compile(rb"\x1b\[2Kmemseal: step (\d+) \| ([^|\x1b]*)")
RUNS_UNTIL_TOLD = """import os, sys, torch
model = torch.nn.Linear(32, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
total = 0
while not os.path.exists(sys.argv[1]):
    loss = model(torch.randn(16, 32)).pow(2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    total = total + loss
print("stopped")
"""


class Terminal(unittest.TestCase):
    def test_a_progress_line_is_kept_up_to_date_below_the_programs_output(self):
        with tempfile.TemporaryDirectory() as folder:
            script = os.path.join(folder, "train.py")
            with open(script, "w") as file:
                file.write(RUNS_UNTIL_TOLD)
            stop = os.path.join(folder, "stop")
            process, master = start_in_terminal("--", ARGS.python, script, stop)
            try:
                # The program runs until the line has shown a leak at two different steps.
                def two_steps_with_the_leak(text):
                    steps = {int(m.group(1)) for m in PROGRESS.finditer(text)
                             if m.group(2).startswith(b"LEAK: autograd-graph-retained")}
                    return len(steps) >= 2
                shown = read_terminal(master, until=two_steps_with_the_leak)
                open(stop, "w").close()
                shown += read_terminal(master)
            finally:
                os.close(master)
                process.wait(timeout=300)
        self.assertEqual(process.returncode, 0)
        # Drawn on the last row (24) of a scroll region of rows 1-23, the cursor saved and restored
        # around each draw; at the end the whole height is the program's again and the line is
        # cleared, before the report.
        self.assertIn(b"\x1b7\x1b[1;23r\x1b[24;1H\x1b[2Kmemseal: step", shown)
        self.assertIn(b"at train.py:10", shown)
        end = shown.rindex(b"\x1b7\x1b[r\x1b[24;1H\x1b[2K\x1b8")
        self.assertGreater(end, shown.rindex(b"\x1b[2Kmemseal: step"))
        self.assertIn(b"stopped", shown)
        self.assertIn(b"memseal: LEAK", shown[end:])

    def test_quiet_turns_the_line_off_and_a_pipe_never_gets_it(self):
        script = os.path.join(ARGS.scripts, "train.py")
        process, master = start_in_terminal("--quiet", "--", ARGS.python, script, "--steps", "200")
        try:
            shown = read_terminal(master)
        finally:
            os.close(master)
            process.wait(timeout=300)
        self.assertIn(b"memseal: no leak", shown)
        self.assertNotIn(b"\x1b7", shown)
        code, _, err = run("--", ARGS.python, script, "--steps", "200")
        self.assertEqual(code, 0, err)
        self.assertIn("memseal: no leak", err)
        self.assertNotIn("\x1b", err)


class Children(unittest.TestCase):
    def dataloader(self, dataset, *flags):
        return run(*flags, "--", ARGS.python, os.path.join(ARGS.scripts, "dataloader.py"),
                   "--dataset", dataset, "--items", "300000")

    def test_workers_that_copy_a_python_dataset_on_read_are_reported(self):
        code, out, err = self.dataloader("lists", "--follow-fork")
        self.assertEqual(code, 0, err)
        self.assertIn("sum ", out)
        self.assertEqual(err.count("(forked)"), 2, err)
        self.assertEqual(err.count("private memory +"), 2, err)
        self.assertIn("copy-on-write", err)

    def test_workers_reading_a_tensor_dataset_are_not(self):
        code, _, err = self.dataloader("tensor", "--follow-fork")
        self.assertEqual(code, 0, err)
        self.assertEqual(err.count("(forked)"), 2, err)
        self.assertNotIn("LEAK", err)

    def test_a_worker_keeping_its_samples_names_the_line_that_made_them(self):
        # A forked worker gets a detector of its own: its leak has a site and a Python line.
        script = ("import torch\n"
                  "from torch.utils.data import DataLoader, Dataset\n"
                  "class Remembering(Dataset):\n"
                  "    def __init__(self):\n        self.seen = []\n"
                  "    def __len__(self):\n        return 20000\n"
                  "    def __getitem__(self, index):\n"
                  "        sample = torch.randn(64)\n"
                  "        self.seen.append(sample * 2)\n"
                  "        return sample\n"
                  "loader = DataLoader(Remembering(), batch_size=64, num_workers=1,\n"
                  "                    multiprocessing_context='fork')\n"
                  "print(sum(float(batch.sum()) for batch in loader) != 0)\n")
        with tempfile.TemporaryDirectory() as folder:
            program = os.path.join(folder, "remembering.py")
            with open(program, "w", encoding="utf-8") as source:
                source.write(script)
            code, out, err = run("--follow-fork", "--", ARGS.python, program)
        self.assertEqual(code, 0, err)
        self.assertEqual(out, "True\n")
        child = err[err.index("(forked)"):]
        self.assertIn("tensors-retained", child)
        self.assertIn("aten::mul", child)
        self.assertIn("remembering.py:10", child)
        self.assertIn("time windows sized to the run", child)

    def test_children_are_not_traced_without_follow_fork(self):
        code, _, err = self.dataloader("lists")
        self.assertEqual(code, 0, err)
        self.assertNotIn("child pid", err)

    def test_a_pool_terminating_its_workers_ends_them_and_leaves_the_program_alone(self):
        # Pool.terminate() sends SIGTERM to each worker and waits for it: a worker must die of it
        # as it would without memseal, and the signal must not reach the program's own handler.
        script = ("import multiprocessing, torch\n"
                  "def double(x):\n    return x * 2\n"
                  "if __name__ == '__main__':\n"
                  "    pool = multiprocessing.get_context('fork').Pool(2)\n"
                  "    print(sum(pool.map(double, range(100))))\n"
                  "    pool.terminate()\n    pool.join()\n")
        for flags in ([], ["--follow-fork"]):
            with self.subTest(flags=flags):
                code, out, err = run(*flags, "--", ARGS.python, "-c", script, timeout=120)
                self.assertEqual(code, 0, err)
                self.assertEqual(out, "9900\n")
                self.assertIn("exit status 0", err)

    def test_sigterm_ends_a_forked_child_that_is_not_followed(self):
        # The child says it runs, then waits for ever; the parent ends it with SIGTERM.
        script = ("import os, signal, torch\n"
                  "ready_r, ready_w = os.pipe()\n"
                  "never_r, never_w = os.pipe()\n"
                  "pid = os.fork()\n"
                  "if pid == 0:\n"
                  "    os.write(ready_w, b'x')\n"
                  "    os.read(never_r, 1)\n"
                  "    os._exit(3)\n"
                  "os.read(ready_r, 1)\n"
                  "os.kill(pid, signal.SIGTERM)\n"
                  "_, status = os.waitpid(pid, 0)\n"
                  "print('signal', os.WTERMSIG(status) if os.WIFSIGNALED(status) else None)\n")
        code, out, err = run("--", ARGS.python, "-c", script, timeout=120)
        self.assertEqual(code, 0, err)
        self.assertEqual(out, f"signal {int(signal.SIGTERM)}\n")

    def test_an_execd_child_gets_its_own_full_report(self):
        script = os.path.join(ARGS.scripts, "train.py")
        shell_command = f"'{ARGS.python}' '{script}' --leak total-loss"
        code, _, err = run("--follow-fork", "--", "/bin/sh", "-c", shell_command)
        self.assertEqual(code, 0, err)
        self.assertIn("/bin/sh never loaded libtorch", err)
        self.assertIn("(exec'd)", err)
        self.assertIn("autograd-graph-retained", err)
        code, _, err = run("--", "/bin/sh", "-c", shell_command)
        self.assertEqual(code, 0, err)
        self.assertNotIn("(exec'd)", err)


class BadInput(unittest.TestCase):
    def assert_refused(self, expected, *command):
        code, out, err = run(*command)
        self.assertEqual(code, 2, err)
        self.assertIn(expected, err)
        self.assertEqual(out, "")

    def test_each_bad_input_is_refused_before_the_program_starts(self):
        with tempfile.TemporaryDirectory() as folder:
            not_executable = os.path.join(folder, "data.txt")
            with open(not_executable, "w", encoding="utf-8") as data:
                data.write("not a program\n")
            self.assert_refused("no program given")
            self.assert_refused("no program given", "--warmup", "3", "--")
            self.assert_refused("no such program in PATH", "memseal-no-such-program")
            self.assert_refused("no such program", os.path.join(folder, "missing"))
            self.assert_refused("is not executable", not_executable)
            self.assert_refused("is a directory", folder)
            self.assert_refused("statically linked", ARGS.static_program)
            self.assert_refused("--interval and --step-on", "--interval", "1s", "--step-on",
                                "forward", ARGS.server)
            self.assert_refused("--interval 'soon'", "--interval", "soon", ARGS.server)
            self.assert_refused("--stacks", "--stacks", "sometimes", ARGS.server)
            self.assert_refused("is a directory", "--json", folder, ARGS.server)
            self.assert_refused("is a directory", "--memory-viz", folder, ARGS.server)
            self.assert_refused("no folder", "--memory-viz", os.path.join(folder, "no", "x.pickle"),
                                ARGS.server)
            self.assert_refused("--memory-viz-events must be at least 1", "--memory-viz",
                                os.path.join(folder, "x.pickle"), "--memory-viz-events", "0",
                                ARGS.server)

    def test_a_program_that_never_loads_libtorch_runs_and_says_so(self):
        code, out, err = run("--", "/bin/sh", "-c", "echo hello; exit 5")
        self.assertEqual(code, 5)
        self.assertEqual(out, "hello\n")
        self.assertIn("never loaded libtorch", err)

    def test_a_static_program_is_not_started(self):
        code, out, _ = run(ARGS.static_program)
        self.assertEqual(code, 2)
        self.assertNotIn("static program ran", out)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--memseal", required=True)
    parser.add_argument("--server", required=True)
    parser.add_argument("--static-program", required=True)
    parser.add_argument("--scoped-loop", required=True)
    parser.add_argument("--scripts", required=True)
    parser.add_argument("--python", required=True)
    parser.add_argument("--memory-viz-check", required=True)
    ARGS, rest = parser.parse_known_args()
    unittest.main(argv=[sys.argv[0], *rest], verbosity=2)
