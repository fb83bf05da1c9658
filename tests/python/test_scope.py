import pytest
import torch

import memseal

kept_globally = []


def test_a_clean_scope_and_keep():
    with memseal.Scope("clean") as scope:
        a = torch.randn(100)
        out = scope.keep(a * 2)
        del a
    assert scope.report.clean
    assert scope.report.stats.kept == 1
    assert out.shape == (100,)


def test_survivors_raise_with_the_report_and_the_python_line():
    with pytest.raises(memseal.ScopeLeakError) as raised:
        with memseal.Scope("leaky"):
            kept_globally.append(torch.randn(100))  # the survivor
    report = raised.value.report
    assert report.stats.survivors == 1
    frames = [f for f in report.survivors[0].site.frames if not f.is_internal]
    assert frames and frames[0].file == __file__
    assert "test_scope.py" in report.text()
    kept_globally.clear()


def test_detach_and_policies():
    with memseal.Scope("detached") as scope:
        kept_globally.append(scope.detach(torch.randn(10)))
    assert scope.report.clean
    seen = []
    with memseal.Scope("callback", on_survivors="callback", callback=seen.append):
        kept_globally.append(torch.randn(10))
    assert len(seen) == 1 and seen[0].stats.survivors == 1
    kept_globally.clear()


def test_an_exception_is_not_replaced_by_a_scope_error():
    with pytest.raises(KeyError):
        with memseal.Scope("failing"):
            kept_globally.append(torch.randn(10))
            raise KeyError("original")
    kept_globally.clear()
    assert not memseal._memseal.tracking_active()
