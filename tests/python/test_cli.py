"""python -m memseal check: the contract and exit codes of `memseal check`."""

import json
import os
import subprocess
import sys

import pytest


def memseal_cli(*args, cwd=None, env=None):
    return subprocess.run([sys.executable, "-m", "memseal", *args], capture_output=True, text=True,
                          cwd=cwd, env=env, timeout=600)


def test_a_leaky_case_exits_1_with_the_report_and_json(case_path, tmp_path):
    out = tmp_path / "report.json"
    # From another folder: the case is found by its path, the package by the environment.
    result = memseal_cli("check", "--steps", "16", "--warmup", "3", "--json", str(out),
                         case_path("leaky_training.py"), cwd=tmp_path)
    assert result.returncode == 1, result.stderr
    assert "autograd-graph-retained" in result.stdout
    assert "leaky_training.py:" in result.stdout  # the Python line
    data = json.loads(out.read_text())
    assert data["schema"] == "memseal.check/1" and data["verdict"] == "leak"
    again = memseal_cli("report", str(out))
    assert again.returncode == 1 and "autograd-graph-retained" in again.stdout


def test_a_healthy_case_exits_0(case_path):
    result = memseal_cli("check", "--steps", "16", "--warmup", "3", "--quiet",
                         case_path("healthy.py"))
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout == ""


def test_an_unbounded_cache_names_its_holder(case_path):
    result = memseal_cli("check", "--steps", "20", "--warmup", "3", case_path("cache_by_shape.py"))
    assert result.returncode == 1, result.stderr
    assert "tensors-retained" in result.stdout
    assert "generator.cache" in result.stdout


@pytest.mark.parametrize(
    "arguments, message",
    [
        (["check", "missing.py"], "missing.py: no such file"),
        (["check", "@syntax_error.py"], "syntax error"),
        (["check", "@no_step.py"], "defines no function step(i)"),
        (["check", "@raises.py"], "step(2) raised"),
        (["check", "--stacks", "sometimes", "@healthy.py"], "sample:N"),
        (["check", "--steps", "5", "--warmup", "3", "@healthy.py"], "must exceed --warmup"),
        (["check", "--steps", "many", "@healthy.py"], "not a whole number"),
        (["check"], "required"),
        (["report", "missing.json"], "cannot read missing.json"),
        ([], "usage"),
    ],
)
def test_bad_inputs_exit_2_and_say_why(arguments, message, case_path):
    arguments = [case_path(a[1:]) if a.startswith("@") else a for a in arguments]
    result = memseal_cli(*arguments)
    assert result.returncode == 2, result.stdout + result.stderr
    assert message in result.stderr
    assert "LEAK" not in result.stdout
    if "--stacks" in arguments:  # options are checked before the case is loaded or run
        assert "raised" not in result.stderr


def test_an_exception_in_step_shows_its_traceback(case_path):
    result = memseal_cli("check", case_path("raises.py"))
    assert result.returncode == 2
    assert "KeyError: 'missing batch'" in result.stderr and "raises.py" in result.stderr


def test_a_bad_environment_variable_exits_2(case_path):
    env = dict(os.environ, MEMSEAL_WATCH_OPS="sometimes")
    result = memseal_cli("check", case_path("healthy.py"), env=env)
    assert result.returncode == 2 and "MEMSEAL_WATCH_OPS" in result.stderr


def test_the_former_name_of_watch_ops_is_still_taken(case_path):
    result = memseal_cli("check", case_path("healthy.py"), "--observe-ops", "every:0")
    assert result.returncode == 2 and "every:N" in result.stderr
    env = dict(os.environ, MEMSEAL_OBSERVE_OPS="sometimes")
    result = memseal_cli("check", case_path("healthy.py"), env=env)
    assert result.returncode == 2 and "MEMSEAL_OBSERVE_OPS=sometimes" in result.stderr


def test_a_report_of_another_schema_exits_2(tmp_path):
    bad = tmp_path / "other.json"
    bad.write_text('{"schema": "something.else/1"}')
    result = memseal_cli("report", str(bad))
    assert result.returncode == 2 and "schema" in result.stderr


def test_json_into_a_directory_exits_2_before_running(case_path, tmp_path):
    result = memseal_cli("check", "--json", str(tmp_path), case_path("healthy.py"))
    assert result.returncode == 2 and "is a directory" in result.stderr
