"""memseal's pytest plugin (entry point pytest11: loaded wherever memseal is installed).

    @pytest.mark.memseal_no_leaks           # fails if tensors made by the test outlive it
    def test_preprocess(): ...

    @pytest.mark.memseal_check(steps=30, warmup=5)   # runs the test 30 times; fails on a leak
    def test_train_step(): ...

    pytest --memseal      # every test as if marked memseal_no_leaks (like memseal's gtest listener)

    @pytest.mark.memseal(peak="512MiB")   # fails when the test's peak tensor memory is above it
    def test_forward(): ...

    pytest --memseal-baseline=DIR [--memseal-tolerance=5%]   # memory held in CI

With --memseal-baseline, each test marked memseal or memseal_check is held to its baseline in DIR
(one JSON report per test, written by the first run, or by --memseal-update-baseline): it fails
when its peak grows by more than the tolerance, or a leak cause appears that the baseline did not
have, and the failure shows what moved (`memseal diff` of the baseline and this run).

No threshold to tune: a no-leaks test fails when any tensor its body made is still alive when it
returns (fixtures are outside, so what a fixture keeps is not the test's), and a checked test
fails on the leak detector's own verdict. Failures list the survivors or findings with their
Python lines.
"""

import os
import re

import pytest


def pytest_addoption(parser):
    group = parser.getgroup("memseal")
    group.addoption("--memseal", action="store_true", default=False,
                    help="fail every test whose body leaves tensors it made alive")
    group.addoption("--memseal-baseline", metavar="DIR", default=None,
                    help="hold each test marked memseal or memseal_check to its report in DIR "
                         "(written when missing): fail when its peak grows more than the "
                         "tolerance or a new leak cause appears")
    group.addoption("--memseal-tolerance", metavar="FRACTION", default="5%",
                    help="how much a test's peak may grow over its baseline: 5%% (default) or 0.05")
    group.addoption("--memseal-update-baseline", action="store_true", default=False,
                    help="write every held test's report as its new baseline")


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "memseal_no_leaks: fail if tensors made by the test are still alive after it")
    config.addinivalue_line(
        "markers",
        "memseal_check(steps=30, warmup=5): run the test `steps` times under memseal's leak "
        "detector and fail on a leak")
    config.addinivalue_line(
        "markers",
        "memseal(peak=None): measure the test's peak tensor memory (fail above `peak`: bytes or "
        "'512MiB'); held to --memseal-baseline")
    directory = config.getoption("--memseal-baseline")
    if config.getoption("--memseal-update-baseline") and not directory:
        raise pytest.UsageError("memseal: --memseal-update-baseline needs --memseal-baseline=DIR")
    if directory is not None:
        if os.path.exists(directory) and not os.path.isdir(directory):
            raise pytest.UsageError(f"memseal: --memseal-baseline {directory} is not a folder")
        from . import _diff

        try:
            config._memseal_tolerance = _diff.parse_tolerance(
                config.getoption("--memseal-tolerance"))
        except ValueError as error:
            raise pytest.UsageError(str(error)) from None
        config._memseal_written = []


def _call_test(pyfuncitem):
    arguments = {name: pyfuncitem.funcargs[name] for name in pyfuncitem._fixtureinfo.argnames}
    return pyfuncitem.obj(**arguments)


def _byte_budget(marker):
    import memseal

    budget = marker.kwargs.get("peak", marker.args[0] if marker.args else None)
    if budget is None or (isinstance(budget, int) and not isinstance(budget, bool) and budget > 0):
        return budget
    parsed = memseal._memseal.parse_byte_size(budget) if isinstance(budget, str) else None
    if parsed is None:
        pytest.fail(f"memseal: peak={budget!r} is not a size such as 512MiB or 4096", pytrace=False)
    return parsed


def _baseline_path(item, directory):
    return os.path.join(directory, re.sub(r"[^A-Za-z0-9_.-]+", "_", item.nodeid) + ".json")


def _hold_to_baseline(item, report_json):
    """Writes the test's baseline where there is none; else fails the test when its report is
    over the baseline, with what moved."""
    directory = item.config.getoption("--memseal-baseline")
    if directory is None:
        return
    from . import _diff
    from ._memseal import write_report_file

    path = _baseline_path(item, directory)
    if item.config.getoption("--memseal-update-baseline") or not os.path.exists(path):
        os.makedirs(directory, exist_ok=True)
        write_report_file(path, report_json)
        item.config._memseal_written.append(path)
        return
    try:
        with open(path, encoding="utf-8") as file:
            baseline = file.read()
    except (OSError, UnicodeDecodeError) as error:
        pytest.fail(f"memseal: the baseline {path} cannot be read ({error})", pytrace=False)
    try:
        passed, failures, summary, diff = _diff.check_against_baseline(
            baseline, report_json, item.config._memseal_tolerance, path)
    except ValueError as error:
        pytest.fail(f"memseal: the baseline {path} cannot be compared with this run: {error} "
                    "(--memseal-update-baseline replaces it)", pytrace=False)
    if not passed:
        reasons = "\n".join(f"  {failure}" for failure in failures)
        pytest.fail(f"{summary}\n{reasons}\n\n{diff.text()}", pytrace=False)


def _run_with_peak(pyfuncitem, marker):
    import memseal

    budget = _byte_budget(marker)
    report = memseal.explain(lambda _: _call_test(pyfuncitem), steps=1, warmup=0)
    if budget is not None and report.peak_bytes > budget:
        pytest.fail(f"memseal: the test's peak tensor memory, {report.peak_bytes} bytes, is above "
                    f"its budget of {budget} bytes:\n{report.text()}", pytrace=False)
    _hold_to_baseline(pyfuncitem, report.to_json())


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    written = getattr(config, "_memseal_written", None)
    if written:
        terminalreporter.write_line(
            f"memseal: wrote {len(written)} baseline(s) to {config.getoption('--memseal-baseline')}")


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem):
    import inspect

    import memseal

    if inspect.iscoroutinefunction(pyfuncitem.obj):
        return None  # async tests belong to their own plugin (pytest-asyncio); memseal leaves them
    checked = pyfuncitem.get_closest_marker("memseal_check")
    if checked is not None:
        options = dict(checked.kwargs)
        if checked.args:
            options.setdefault("steps", checked.args[0])
        steps = options.pop("steps", 30)
        warmup = options.pop("warmup", 5)
        report = memseal.check(lambda _: _call_test(pyfuncitem), steps=steps, warmup=warmup,
                               on_leak="none", **options)
        if report.leak:
            pytest.fail(f"memseal: the test leaks when repeated ({steps} runs):\n{report.text()}",
                        pytrace=False)
        _hold_to_baseline(pyfuncitem, report.to_json())
        return True
    measured = pyfuncitem.get_closest_marker("memseal")
    if measured is not None:
        _run_with_peak(pyfuncitem, measured)
        return True
    if pyfuncitem.get_closest_marker("memseal_no_leaks") is not None or \
            pyfuncitem.config.getoption("--memseal"):
        scope = memseal.Scope(pyfuncitem.name, on_survivors="none")
        with scope:
            _call_test(pyfuncitem)
        if scope.report is not None and not scope.report.clean:
            pytest.fail(f"memseal: tensors made by the test are still alive after it:\n"
                        f"{scope.report.text()}", pytrace=False)
        return True
    return None
