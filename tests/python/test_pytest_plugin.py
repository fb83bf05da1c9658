"""The pytest plugin, run in pytest's own pytester."""

LEAKY_AND_CLEAN = """
import pytest
import torch

kept = []

@pytest.mark.memseal_no_leaks
def test_leaves_a_tensor():
    kept.append(torch.randn(100))  # survives the test

@pytest.mark.memseal_no_leaks
def test_clean():
    a = torch.randn(100)
    assert a.sum() == a.sum()

def test_unmarked_leaves_a_tensor():
    kept.append(torch.randn(100))
"""


def test_no_leaks_marker_fails_only_the_test_that_leaves_tensors(pytester):
    pytester.makepyfile(LEAKY_AND_CLEAN)
    result = pytester.runpytest_subprocess()
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines(["*test_leaves_a_tensor*", "*still alive after it*",
                                 "*test_no_leaks_marker_fails_only_the_test_that_leaves_tensors.py:*"])


def test_memseal_flag_checks_every_test(pytester):
    pytester.makepyfile(LEAKY_AND_CLEAN)
    result = pytester.runpytest_subprocess("--memseal")
    result.assert_outcomes(passed=1, failed=2)


def test_check_marker_repeats_the_test_and_fails_on_a_leak(pytester):
    pytester.makepyfile("""
import pytest
import torch

cache = []
runs = []

@pytest.mark.memseal_check(steps=16, warmup=3)
def test_leaky_step():
    cache.append(torch.randn(64))

@pytest.mark.memseal_check(steps=16, warmup=3)
def test_healthy_step():
    runs.append(1)
    torch.randn(64).sum()

def test_repeated():
    assert len(runs) == 16
""")
    result = pytester.runpytest_subprocess()
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines(["*the test leaks when repeated*", "*tensors-retained*"])


def test_plugin_is_registered_by_the_entry_point(pytester):
    pytester.makepyfile("""
def test_nothing():
    pass
""")
    result = pytester.runpytest_subprocess("--markers")
    result.stdout.fnmatch_lines(["*memseal_no_leaks*", "*memseal_check*"])
