"""The `memseal` command that `pip install` gives: every subcommand of the C++ command, `run` on an
unmodified Python script included, the same from `python -m memseal`, and its errors."""

import importlib.metadata
import os
import shutil
import subprocess
import sys

import pytest

import memseal

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPTS = os.path.normpath(os.path.join(HERE, "..", "..", "examples", "scripts"))
# The console script pip installed beside this interpreter.
CONSOLE = os.path.join(os.path.dirname(sys.executable), "memseal")

needs_console = pytest.mark.skipif(
    not os.access(CONSOLE, os.X_OK), reason="the memseal console script is not installed here")


def console(*args, **kwargs):
    return subprocess.run([CONSOLE, *args], capture_output=True, text=True, timeout=300, **kwargs)


def module(*args, **kwargs):
    return subprocess.run([sys.executable, "-m", "memseal", *args], capture_output=True, text=True,
                          timeout=300, **kwargs)


@needs_console
def test_the_version_is_the_cores_from_both_entry_points():
    from_console = console("--version")
    from_module = module("--version")
    assert from_console.returncode == 0 and from_module.returncode == 0
    assert from_console.stdout == from_module.stdout
    assert from_console.stdout.startswith(f"memseal {memseal.__version__} (libtorch ")


@needs_console
def test_help_lists_every_subcommand_of_the_cpp_command():
    result = console("--help")
    assert result.returncode == 0
    for command in ("check", "explain", "fit", "report", "run", "plan", "merge"):
        assert f"    {command} " in result.stdout, command


@needs_console
def test_run_finds_the_leak_of_an_unmodified_training_script(tmp_path):
    report = tmp_path / "run.json"
    result = console("run", "--fail-on-leak", "--json", str(report), "--", sys.executable,
                     os.path.join(SCRIPTS, "train.py"), "--leak", "total-loss", "--steps", "120")
    assert result.returncode == 1, result.stderr
    assert "mean loss" in result.stdout  # the program's own output passes through
    assert "autograd-graph-retained" in result.stderr
    assert "train.py" in result.stderr  # the Python line of the leak
    assert memseal.LeakReport.from_json(report.read_text()).categories == ["autograd-graph-retained"]


def test_python_m_memseal_run_is_the_same_command():
    result = module("run", "--", sys.executable, os.path.join(SCRIPTS, "train.py"), "--steps", "60")
    assert result.returncode == 0, result.stderr
    assert "no leak" in result.stderr


@pytest.mark.parametrize("live", [[], ["--live"]], ids=["run", "run-live"])
def test_the_program_gets_sigpipe_as_a_shell_gives_it(live):
    # Python ignores SIGPIPE for itself, and an ignored signal stays ignored across exec: the
    # program under `python -m memseal run` (with the live page's server, which ignores it in
    # memseal, or without) must not inherit that, or `program | head` would not end the program.
    result = module("run", "--quiet", *live, "--", "/bin/sh", "-c", "grep SigIgn /proc/self/status")
    assert result.returncode == 0, result.stderr
    ignored = int(result.stdout.split()[-1], 16)
    assert not ignored & (1 << (13 - 1)), result.stdout  # SIGPIPE is 13


HEAP_HOLES = """
import ctypes
import torch
libc = ctypes.CDLL(None)
libc.malloc.restype = ctypes.c_void_p
libc.malloc.argtypes = [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]
libc.memset.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t]
model = torch.nn.Linear(64, 64)
kept = []
for step in range(300):
    with torch.no_grad():
        model(torch.randn(32, 64)).sum()
    if step == 150:  # 75 MiB of freed blocks between blocks kept: holes malloc keeps, resident
        size = 96 << 10
        freed = []
        for _ in range(800):
            freed.append(libc.malloc(size))
            kept.append(libc.malloc(size))
            libc.memset(freed[-1], 1, size)
            libc.memset(kept[-1], 1, size)
        for block in freed:
            libc.free(block)
"""


@needs_console
@pytest.mark.skipif(not hasattr(__import__("ctypes").CDLL(None), "mallinfo2"),
                    reason="the C library has no mallinfo2 (glibc 2.33 or later)")
def test_run_says_what_malloc_holds_free_and_does_not_take_it_for_a_leak(tmp_path):
    script = tmp_path / "heap_holes.py"
    script.write_text(HEAP_HOLES)
    result = console("run", "--fail-on-leak", "--", sys.executable, str(script))
    assert result.returncode == 0, result.stderr
    assert "no leak" in result.stderr
    note = result.stderr[result.stderr.index("note: malloc holds"):]
    assert "of freed memory" in note and "malloc_trim(0)" in note, result.stderr


@needs_console
def test_run_passes_a_failing_scripts_exit_status_and_traceback_through(tmp_path):
    script = tmp_path / "fails.py"
    script.write_text("import torch\nx = torch.ones(3)\nraise SystemExit('bad input: ' + str(x.sum().item()))\n")
    result = console("run", "--", sys.executable, str(script))
    assert result.returncode == 1
    assert "bad input: 3.0" in result.stderr


@needs_console
def test_run_of_a_missing_program_exits_2():
    result = console("run", "--", "no-such-program-anywhere")
    assert result.returncode == 2
    assert "no-such-program-anywhere: no such program" in result.stderr


@needs_console
def test_run_refuses_a_python_with_another_torch_before_it_starts(tmp_path):
    # A torch package of another release, found first on that Python's path: memseal's runtime
    # would be loaded beside its libtorch. The script must never run.
    fake = tmp_path / "site" / "torch"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise ImportError('not a real torch')\n")
    (fake / "version.py").write_text("__version__ = '2.8.0+cpu'\n")  # no release memseal builds with
    marker = tmp_path / "ran"
    script = tmp_path / "script.py"
    script.write_text(f"open({str(marker)!r}, 'w').close()\n")
    environment = dict(os.environ, PYTHONPATH=str(tmp_path / "site"))
    result = console("run", "--", sys.executable, str(script), env=environment)
    assert result.returncode == 2
    assert "torch 2.8.0+cpu" in result.stderr
    built_with = importlib.metadata.version("torch").split("+")[0]  # this environment's torch
    assert f"built against torch {built_with}" in result.stderr
    assert "-m pip install --force-reinstall --no-deps" in result.stderr  # how to build for it
    assert not marker.exists()


@needs_console
def test_check_of_a_python_case_is_python_m_memseal_check(case_path):
    arguments = ("check", "--steps", "15", "--warmup", "3", case_path("losses_list.py"))
    from_console = console(*arguments)
    from_module = module(*arguments)
    assert from_console.returncode == from_module.returncode == 1
    assert "tensors-retained" in from_console.stdout or "autograd-graph-retained" in from_console.stdout
    first_line = from_console.stdout.splitlines()[0]
    assert first_line == from_module.stdout.splitlines()[0]


@needs_console
def test_check_of_a_file_that_is_neither_exits_2(tmp_path):
    notes = tmp_path / "notes.txt"
    notes.write_text("not a case\n")
    result = console("check", str(notes))
    assert result.returncode == 2
    assert "notes.txt" in result.stderr


@needs_console
def test_plan_without_a_model_is_the_cpp_commands_usage_error():
    result = console("plan")
    assert result.returncode != 0
    assert "model" in (result.stderr + result.stdout).lower()


def test_a_package_without_the_command_says_so(tmp_path):
    # A copy of the Python files alone (as a source checkout on PYTHONPATH would be).
    package = tmp_path / "memseal"
    shutil.copytree(os.path.dirname(memseal.__file__), package,
                    ignore=shutil.ignore_patterns("bin", "lib", "__pycache__"))
    environment = dict(os.environ, PYTHONPATH=str(tmp_path))
    result = subprocess.run([sys.executable, "-m", "memseal", "run", "--", "true"],
                            capture_output=True, text=True, env=environment, timeout=120)
    assert result.returncode == 2
    assert "has no memseal command" in result.stderr
