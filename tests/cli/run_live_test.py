"""`memseal run --live`: the page memseal serves while the program runs, looked at as a person would
(headless Chromium running the page's own script) and poked at as a hostile or careless client would
(other hosts, malformed requests, many tabs, a tab closed while it waits).

The program (tests/cli/programs/live_loop.py) is steered by files, so each test decides when the
program starts to leak and when it ends; every wait is for something the server or the program
says, with a time limit. Chromium's --virtual-time-budget runs the page's timers without waiting
for them, and stops its clock while a request is in flight: the page polls the server for as many
rounds as the budget holds, however long each answer takes in real time.
"""
import argparse
import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import urllib.error
import urllib.request

ARGS = None
URL_LINE = re.compile(r"memseal run: live page at (http://\S+/)")
WAIT_S = 180


def chromium():
    for name in [os.environ.get("CHROMIUM"), "chromium", "chromium-browser", "google-chrome"]:
        if name and shutil.which(name):
            return shutil.which(name)
    return None


def wait_until(condition, what, timeout=WAIT_S):
    """Asks `condition` until it gives something true; fails the test after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"waited {timeout} s for {what}")


class LiveRun:
    """memseal run --live ... -- PROGRAM, its stderr read on a thread, the page's URL from it."""

    def __init__(self, program, folder, stdin=subprocess.DEVNULL):
        # In `folder`: a distributed job's reports go to the current folder.
        command = [ARGS.memseal, "run", "--quiet", "--live", "--", *program]
        self.process = subprocess.Popen(command, cwd=folder, stdin=stdin, stdout=subprocess.PIPE,
                                        stderr=subprocess.PIPE, text=True,
                                        env=dict(os.environ, OMP_NUM_THREADS="1"))
        self.stderr_lines = []
        self.url_found = threading.Event()
        self.url = None
        self.reader = threading.Thread(target=self._read_stderr, daemon=True)
        self.reader.start()
        if not self.url_found.wait(WAIT_S) or self.url is None:
            self.process.kill()
            raise AssertionError("memseal run printed no live page URL:\n" + self.stderr())

    def _read_stderr(self):
        for line in self.process.stderr:
            self.stderr_lines.append(line)
            match = URL_LINE.search(line)
            if match and self.url is None:
                self.url = match.group(1)
                self.url_found.set()
        self.url_found.set()

    def stderr(self):
        return "".join(self.stderr_lines)

    def get(self, path, headers=None, timeout=30):
        request = urllib.request.Request(self.url + path.lstrip("/"), headers=headers or {})
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, response.read().decode("utf-8")

    def state(self):
        try:
            return json.loads(self.get("/state.json")[1])
        except (OSError, urllib.error.URLError):
            return None  # the program has ended and memseal with it

    def port(self):
        return int(self.url.rstrip("/").rsplit(":", 1)[1])

    def finish(self, timeout=WAIT_S):
        # stdout read here, stderr by the reader: communicate() would read stderr too, and take
        # part of it from the reader.
        out = self.process.stdout.read()
        self.process.wait(timeout)
        self.reader.join(timeout)
        return self.process.returncode, out, self.stderr()


def findings(state):
    return (state or {}).get("check", {}).get("findings", [])


def steps(state):
    return (state or {}).get("check", {}).get("steps", 0)


class Browser:
    """The page as headless Chromium shows it after running for `budget_ms` of virtual time."""

    def __init__(self, url, budget_ms):
        self.profile = tempfile.mkdtemp()
        self.process = subprocess.Popen(
            [ARGS.chromium, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
             f"--user-data-dir={self.profile}", f"--virtual-time-budget={budget_ms}",
             "--dump-dom", url],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, errors="replace")

    def dom(self):
        out, _ = self.process.communicate(timeout=WAIT_S)
        shutil.rmtree(self.profile, ignore_errors=True)
        return out


def root_attribute(dom, name):
    match = re.search(r"<html[^>]*\b" + name + r'="([^"]*)"', dom)
    return match.group(1) if match else None


def finding_cards(dom):
    return len(re.findall(r'class="finding-card card"', dom))


def chart_points(dom):
    """The points of the page's first line chart (tracked bytes per step)."""
    match = re.search(r'<polyline[^>]*points="([^"]*)"', dom)
    return len(match.group(1).split()) if match else 0


class Files:
    def setUp(self):
        self.folder = tempfile.mkdtemp()
        self.until = os.path.join(self.folder, "stop")
        self.leak_when = os.path.join(self.folder, "leak")

    def tearDown(self):
        shutil.rmtree(self.folder, ignore_errors=True)

    def program(self, *extra):
        return [ARGS.python, os.path.join(ARGS.programs, "live_loop.py"), "--until", self.until,
                *extra]

    def touch(self, path):
        with open(path, "w"):
            pass


@unittest.skipUnless(chromium(), "no Chromium to open the page in")
class InTheBrowser(Files, unittest.TestCase):
    def test_a_leak_appears_on_the_open_page_and_the_page_ends_with_the_final_verdict(self):
        run = LiveRun(self.program("--leak-when", self.leak_when), self.folder)
        wait_until(lambda: steps(run.state()) > 20, "the first report")
        self.assertEqual(findings(run.state()), [])
        before = Browser(run.url, 3000).dom()
        self.assertEqual(root_attribute(before, "data-memseal-live"), "running", before[-2000:])
        self.assertGreaterEqual(int(root_attribute(before, "data-memseal-updates") or 0), 1)
        self.assertEqual(finding_cards(before), 0)
        self.assertIsNone(root_attribute(before, "data-memseal-errors"))

        # A tab kept open while the program starts to leak and ends.
        browser = Browser(run.url, 600000)
        self.touch(self.leak_when)
        wait_until(lambda: findings(run.state()), "a finding in the streamed report")
        self.touch(self.until)
        code, out, err = run.finish()
        self.assertEqual(code, 0, err)
        self.assertIn("live_loop:", out)
        after = browser.dom()
        self.assertEqual(root_attribute(after, "data-memseal-live"), "ended", after[-2000:])
        self.assertGreaterEqual(int(root_attribute(after, "data-memseal-updates") or 0), 1)
        self.assertIsNone(root_attribute(after, "data-memseal-errors"))
        self.assertIn('class="verdict leak"', after)
        self.assertGreaterEqual(finding_cards(after), 1)
        self.assertIn("autograd-graph-retained", after)
        self.assertIn("The program ended (exit status 0)", after)
        self.assertGreater(chart_points(after), chart_points(before))

    def test_a_healthy_program_never_shows_a_finding(self):
        run = LiveRun(self.program("--steps", "1500"), self.folder)
        browser = Browser(run.url, 600000)
        seen = []
        while run.process.poll() is None:
            state = run.state()
            if state:
                seen.append(state)
            time.sleep(0.2)
        code, _, err = run.finish()
        self.assertEqual(code, 0, err)
        dom = browser.dom()
        self.assertTrue(any(steps(state) > 0 for state in seen), err)
        self.assertEqual([findings(state) for state in seen if findings(state)], [])
        self.assertEqual(root_attribute(dom, "data-memseal-live"), "ended", dom[-2000:])
        self.assertEqual(finding_cards(dom), 0)
        self.assertIn('class="verdict no_leak"', dom)


class Server(Files, unittest.TestCase):
    def test_only_its_own_address_is_answered_and_bad_clients_do_not_disturb_the_program(self):
        run = LiveRun(self.program("--leak-when", self.leak_when), self.folder)
        wait_until(lambda: steps(run.state()) > 0, "the first report")
        # A page elsewhere reaching 127.0.0.1 through a name of its own (DNS rebinding).
        with self.assertRaises(urllib.error.HTTPError) as refused:
            run.get("/", headers={"Host": "attacker.example:80"})
        self.assertEqual(refused.exception.code, 403)
        with self.assertRaises(urllib.error.HTTPError) as missing:
            run.get("/no-such-page")
        self.assertEqual(missing.exception.code, 404)
        self.assertEqual(run.get("/", headers={"Host": "localhost"})[0], 200)

        # Malformed requests of every kind, each on a connection of its own.
        generator = random.Random(1234)
        for attempt in range(120):
            self.assertIsNone(run.process.poll(), f"memseal ended at request {attempt - 1}:\n"
                              + run.stderr()[-3000:])
            # A second for an answer: a request cut short is answered only when the server stops
            # waiting for the rest of it.
            with socket.create_connection(("127.0.0.1", run.port()), timeout=1) as connection:
                try:
                    connection.sendall(malformed_request(generator, attempt))
                    connection.recv(4096)
                except OSError:  # refused in the middle, or no answer within the second
                    pass

        # Many tabs waiting for the next page at once, and tabs closed while they wait.
        version = run.state()["version"]
        answers = []

        def tab():
            answers.append(run.get(f"/page?after={version}", timeout=60))

        tabs = [threading.Thread(target=tab) for _ in range(24)]
        for thread in tabs:
            thread.start()
        for _ in range(8):
            connection = socket.create_connection(("127.0.0.1", run.port()), timeout=10)
            connection.sendall(f"GET /page?after={version} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
                               .encode())
            connection.close()
        for thread in tabs:
            thread.join(WAIT_S)
        self.assertEqual(len(answers), 24)
        self.assertTrue(all(status == 200 and "memseal-live" in page for status, page in answers))

        # The program went on as if nothing happened: it still leaks, is found, and ends.
        self.touch(self.leak_when)
        wait_until(lambda: findings(run.state()), "a finding in the streamed report")
        self.touch(self.until)
        code, _, err = run.finish()
        self.assertEqual(code, 0, err)
        self.assertIn("LEAK: 1 finding", err)
        # The server stopped with it.
        with self.assertRaises(OSError):
            socket.create_connection(("127.0.0.1", run.port()), timeout=5).close()

    def test_a_job_of_two_ranks_shows_a_row_for_each(self):
        script = os.path.join(ARGS.scripts, "ddp_train.py")
        run = LiveRun([ARGS.python, "-m", "torch.distributed.run", "--standalone",
                       "--nproc-per-node=2", script, "--steps", "400"], self.folder)
        # A tab open from the start, read once the job has ended (where Chromium can be had).
        browser = Browser(run.url, 600000) if ARGS.chromium else None
        pages = []

        def both_ranks_shown():
            state = run.state()
            ranks = (state or {}).get("merged", {}).get("ranks", [])
            if len(ranks) == 2 and all(rank.get("status") != "missing" for rank in ranks):
                pages.append(run.get("/")[1])
                return True
            return run.process.poll() is not None

        wait_until(both_ranks_shown, "both ranks' reports")
        code, _, err = run.finish()
        self.assertEqual(code, 0, err)
        self.assertTrue(pages, "the job ended before its page showed both ranks:\n" + err)
        self.assertIn("Ranks of the job", pages[0])
        self.assertIn("(job of 2 ranks)", pages[0])
        rows = re.findall(r"<tr><td[^>]*>(\d+)</td>", pages[0])
        self.assertEqual(sorted(set(rows)), ["0", "1"], pages[0][-3000:])
        if browser is not None:
            dom = browser.dom()
            self.assertEqual(root_attribute(dom, "data-memseal-live"), "ended", dom[-2000:])
            self.assertIsNone(root_attribute(dom, "data-memseal-errors"))
            rows = re.findall(r'<tr><td[^>]*>(?:<a [^>]*>)?(\d+)(?:</a>)?</td>', dom)
            self.assertEqual(sorted(set(rows)), ["0", "1"], dom[-3000:])


def malformed_request(generator, attempt):
    """One malformed or hostile HTTP request: garbage, odd paths, huge or broken headers, a
    request cut short, another method, a body where none belongs."""
    kinds = [
        lambda: bytes(generator.getrandbits(8) for _ in range(generator.randint(1, 600))),
        lambda: b"GET /" + bytes(generator.choice(b"%./\\\x00\xff?#&=<>\"'") for _ in range(200))
        + b" HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
        lambda: b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Long: " + b"a" * 20000 + b"\r\n\r\n",
        lambda: b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n" + b"X: y\r\n" * 500 + b"\r\n",
        lambda: b"GET /state.json HTTP/1.1\r\nHo",
        lambda: b"POST / HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 100000\r\n\r\n" + b"x" * 500,
        lambda: b"GET /page?after=" + generator.choice([b"-1", b"abc", b"1e5", b"", b"0", b"%00",
                                                         b"1" * 40, b"0x10", b"+3"])
        + b" HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
        lambda: b"GET / HTTP/9.9\r\n\r\n",
        lambda: b"\r\n\r\n\r\n",
        lambda: b"GET /page?after=abc&after=%zz HTTP/1.0\r\nHost: [::1]\r\n\r\n",
    ]
    return kinds[attempt % len(kinds)]()


class CommandLine(Files, unittest.TestCase):
    def run_memseal(self, *args):
        return subprocess.run([ARGS.memseal, "run", *args], capture_output=True, text=True,
                              timeout=WAIT_S, stdin=subprocess.DEVNULL)

    def test_an_address_it_cannot_use_is_refused_before_the_program_runs(self):
        taken = socket.socket()
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        try:
            for address, said in [("99999", "the port must be a number from 0"),
                                  ("127.0.0.1:http", "the port must be a number from 0"),
                                  ("[::1", "[ADDRESS]:PORT"),
                                  ("a:b:c", "give PORT, HOST:PORT"),
                                  (f"127.0.0.1:{port}", "cannot listen on 127.0.0.1:")]:
                result = self.run_memseal("--live", address, "--", *self.program("--steps", "3"))
                self.assertEqual(result.returncode, 2, (address, result.stderr))
                self.assertIn(said, result.stderr)
                self.assertNotIn("live_loop:", result.stdout)
        finally:
            taken.close()

    def test_the_word_after_live_is_the_program_when_it_is_no_address(self):
        program = self.program("--steps", "30")
        result = self.run_memseal("--quiet", "--live", *program)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("live_loop: 30 steps", result.stdout)
        self.assertRegex(result.stderr, URL_LINE)

    def test_the_program_gets_sigpipe_as_memseal_got_it(self):
        # The server ignores SIGPIPE in memseal (a tab closed mid-answer); the program must not
        # inherit that: `program | head` ends the program as it would without memseal.
        result = self.run_memseal("--quiet", "--live", "--", "/bin/sh", "-c",
                                  "grep SigIgn /proc/self/status")
        self.assertEqual(result.returncode, 0, result.stderr)
        ignored = int(result.stdout.split()[-1], 16)
        self.assertFalse(ignored & (1 << (13 - 1)), result.stdout)  # SIGPIPE is 13

    def test_on_a_terminal_the_final_report_stays_until_enter_or_ctrl_c(self):
        for how in ("Enter", "Ctrl-C"):
            with self.subTest(how=how):
                controller, terminal = os.openpty()
                try:
                    run = LiveRun(self.program("--steps", "200"), self.folder, stdin=terminal)
                    wait_until(lambda: "press Enter or Ctrl-C" in run.stderr(), "the program's end")
                    state = run.state()
                    self.assertTrue(state["ended"], state)
                    self.assertIn("The program ended (exit status 0)", state["status"])
                    self.assertEqual(state["check"]["verdict"], "no_leak")
                    self.assertIsNone(run.process.poll())
                    if how == "Enter":
                        os.write(controller, b"\n")
                    else:
                        run.process.send_signal(signal.SIGINT)
                    code, out, err = run.finish()
                    # The program's own exit status, whichever way the user said "done".
                    self.assertEqual(code, 0, err)
                    self.assertIn("live_loop: 200 steps", out)
                finally:
                    os.close(controller)
                    os.close(terminal)


def main():
    global ARGS
    parser = argparse.ArgumentParser()
    parser.add_argument("--memseal", required=True)
    parser.add_argument("--python", required=True)
    parser.add_argument("--programs", required=True)
    parser.add_argument("--scripts", required=True)
    ARGS, rest = parser.parse_known_args()
    # The programs run in folders of their own.
    for name in ("memseal", "python", "programs", "scripts"):
        path = getattr(ARGS, name)
        if os.sep in path:
            setattr(ARGS, name, os.path.abspath(path))
    ARGS.chromium = chromium()
    unittest.main(argv=[sys.argv[0], *rest], verbosity=2)


if __name__ == "__main__":
    main()
