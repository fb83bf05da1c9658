"""memseal's pytest plugin (entry point pytest11: loaded wherever memseal is installed).

    @pytest.mark.memseal_no_leaks           # fails if tensors made by the test outlive it
    def test_preprocess(): ...

    @pytest.mark.memseal_check(steps=30, warmup=5)   # runs the test 30 times; fails on a leak
    def test_train_step(): ...

    pytest --memseal      # every test as if marked memseal_no_leaks (like memseal's gtest listener)

No threshold to tune: a no-leaks test fails when any tensor its body made is still alive when it
returns (fixtures are outside, so what a fixture keeps is not the test's), and a checked test
fails on the leak detector's own verdict. Failures list the survivors or findings with their
Python lines.
"""

import pytest


def pytest_addoption(parser):
    group = parser.getgroup("memseal")
    group.addoption("--memseal", action="store_true", default=False,
                    help="fail every test whose body leaves tensors it made alive")


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "memseal_no_leaks: fail if tensors made by the test are still alive after it")
    config.addinivalue_line(
        "markers",
        "memseal_check(steps=30, warmup=5): run the test `steps` times under memseal's leak "
        "detector and fail on a leak")


def _call_test(pyfuncitem):
    arguments = {name: pyfuncitem.funcargs[name] for name in pyfuncitem._fixtureinfo.argnames}
    return pyfuncitem.obj(**arguments)


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
