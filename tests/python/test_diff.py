"""memseal.diff on two runs of one program that differ in one thing (a layer widened, activation
checkpointing, a tensor kept, the batch doubled), identical runs, what it refuses, and the pytest
plugin's peak budget and baseline (in pytest's own pytester)."""

import json

import pytest
import torch
from torch.utils.checkpoint import checkpoint

import memseal


class Net(torch.nn.Module):
    def __init__(self, inner=256, checkpointed=False):
        super().__init__()
        self.encoder = torch.nn.Linear(64, 256)
        self.block = torch.nn.Sequential(torch.nn.Linear(256, inner), torch.nn.ReLU(),
                                         torch.nn.Linear(inner, inner), torch.nn.ReLU(),
                                         torch.nn.Linear(inner, 256))
        self.head = torch.nn.Linear(256, 10)
        self.checkpointed = checkpointed

    def forward(self, x):
        x = torch.relu(self.encoder(x))
        x = checkpoint(self.block, x, use_reentrant=False) if self.checkpointed else self.block(x)
        return self.head(x)


def explained(inner=256, batch=1024, checkpointed=False):
    torch.manual_seed(0)
    model = Net(inner, checkpointed)
    optimizer = torch.optim.Adam(model.parameters())
    x = torch.randn(batch, 64)

    def step(_):
        optimizer.zero_grad()
        model(x).pow(2).mean().backward()
        optimizer.step()

    return memseal.explain(step, model=model, optimizer=optimizer)


@pytest.fixture(scope="module")
def baseline():
    return explained()


def roles_of(diff):
    return {entry["key"]: entry["change"] for entry in diff.breakdowns["role"]}


def assert_additive(diff):
    for dimension in ("role", "module", "line", "op"):
        entries = diff.breakdowns[dimension]
        assert sum(entry["change"] for entry in entries) == diff.peak_change, (dimension, entries)


def test_identical_runs_give_an_empty_diff(baseline):
    diff = memseal.diff(baseline, explained())
    assert diff.empty and diff.peak_change == 0
    assert all(not entries for entries in diff.breakdowns.values())
    assert "no change beyond the noise" in diff.text()


def test_a_widened_layer_is_the_first_module_and_grows_the_parameters_by_its_bytes(baseline):
    diff = memseal.diff(baseline, explained(inner=1024))
    assert not diff.empty and diff.peak_change > 0
    assert_additive(diff)
    assert diff.breakdowns["module"][0]["key"].startswith("Net/block"), diff.text()
    added = sum(p.numel() for p in Net(1024).parameters()) - sum(p.numel() for p in Net().parameters())
    assert roles_of(diff)["parameters"] == 4 * added
    assert roles_of(diff)["optimizer_state"] == 2 * 4 * added


def test_checkpointing_shows_as_activations_given_back(baseline):
    diff = memseal.diff(baseline, explained(checkpointed=True))
    assert_additive(diff)
    roles = roles_of(diff)
    assert roles["activations"] < 0 and roles["activations"] == min(roles.values()), roles


def test_a_doubled_batch_is_mostly_activations(baseline):
    diff = memseal.diff(baseline, explained(batch=2048))
    assert_additive(diff)
    roles = roles_of(diff)
    assert diff.peak_change > 0 and "parameters" not in roles, roles
    assert diff.breakdowns["role"][0]["key"] in ("activations", "temporaries"), roles
    assert roles.get("activations", 0) > 0, roles


def checked(keep):
    kept_losses = []
    model = torch.nn.Linear(32, 32)

    def step(_):
        loss = model(torch.randn(16, 32)).pow(2).mean()
        loss.backward()
        if keep:
            kept_losses.append(loss)

    return memseal.check(step, steps=30, warmup=5, on_leak="none")


def test_a_kept_tensor_is_a_new_cause_with_its_holder(tmp_path):
    before = tmp_path / "before.json"
    before.write_text(checked(keep=False).to_json())
    diff = memseal.diff(str(before), checked(keep=True))
    new = diff.new_causes()
    assert len(new) == 1, diff.text()
    assert new[0]["category"] == "autograd-graph-retained"
    assert "test_diff.py:" in new[0]["site"], new
    assert "kept_losses" in new[0]["holder"], new
    assert "new     autograd-graph-retained" in diff.text()
    assert json.loads(diff.to_json())["causes"][0]["change"] == "new"
    fixed = memseal.diff(checked(keep=True), checked(keep=False))
    assert [cause["change"] for cause in fixed.causes] == ["gone"]


def test_reports_of_two_kinds_or_programs_are_refused(baseline, tmp_path):
    with pytest.raises(ValueError, match="two reports of one kind"):
        memseal.diff(baseline, checked(keep=False))
    other = baseline.to_dict()
    for site in other["sites"]:
        for frame in site["frames"]:
            frame["file"] = frame["shown_file"] = "/elsewhere/other.py"
    with pytest.raises(ValueError, match="two programs"):
        memseal.diff(baseline, other)
    assert "two programs" in memseal.diff(baseline, other, force=True).warnings[0]
    with pytest.raises(ValueError, match="cannot read the report"):
        memseal.diff(baseline, str(tmp_path / "missing.json"))
    with pytest.raises(TypeError, match="not int"):
        memseal.diff(baseline, 3)


def test_the_diff_shows_itself_in_a_notebook_and_as_a_page(baseline, tmp_path):
    diff = memseal.diff(baseline, explained(batch=2048))
    assert "diff-timeline-chart" in diff._repr_html_()
    diff.write_html(tmp_path / "diff.html")
    page = (tmp_path / "diff.html").read_text()
    assert page.startswith("<!DOCTYPE html>") and "What changed between two runs" in page
    assert diff.to_dict()["schema"] == "memseal.diff/1"


def memseal_command(*arguments):
    import subprocess
    import sys

    return subprocess.run([sys.executable, "-m", "memseal", *arguments], capture_output=True,
                          text=True, timeout=600)


def test_python_cases_are_held_to_a_baseline_and_diffed(tmp_path):
    from conftest import case_file

    baseline = str(tmp_path / "base.json")
    first = memseal_command("check", case_file("healthy.py"), "--baseline", baseline)
    assert first.returncode == 0 and "baseline: written to" in first.stdout, first
    held = memseal_command("check", case_file("healthy.py"), "--baseline", baseline)
    assert held.returncode == 0 and "no new leak cause: ok" in held.stdout, held
    leaky = memseal_command("check", case_file("losses_list.py"), "--baseline", baseline,
                            "--json", str(tmp_path / "leaky.json"), "--force-nothing")
    assert leaky.returncode == 2, leaky  # an unknown option is a usage error, nothing runs
    leaky = memseal_command("check", case_file("losses_list.py"), "--baseline", baseline,
                            "--json", str(tmp_path / "leaky.json"))
    assert leaky.returncode == 1, leaky
    assert "a leak cause the baseline did not have" in leaky.stdout, leaky.stdout
    bad = memseal_command("explain", case_file("explain_training.py"), "--baseline", baseline,
                          "--tolerance", "x")
    assert bad.returncode == 2 and "is not a fraction" in bad.stderr, bad
    compared = memseal_command("diff", baseline, str(tmp_path / "leaky.json"))
    assert compared.returncode == 1, compared
    assert "new     " in compared.stdout and "losses_list.py" in compared.stdout, compared.stdout


PEAK_TESTS = """
import os
import pytest
import torch

ELEMENTS = int(os.environ.get("ELEMENTS", "262144"))  # 1 MiB of floats

@pytest.mark.memseal(peak="{budget}")
def test_peak():
    x = torch.ones(ELEMENTS)
    assert float(x.sum()) == ELEMENTS
"""


def test_a_peak_above_its_budget_fails_the_test(pytester):
    pytester.makepyfile(PEAK_TESTS.format(budget="512KiB"))
    result = pytester.runpytest_subprocess()
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*peak tensor memory, 10485?? bytes, is above its budget of "
                                 "524288 bytes*"])
    pytester.makepyfile(PEAK_TESTS.format(budget="4MiB"))
    pytester.runpytest_subprocess().assert_outcomes(passed=1)
    pytester.makepyfile(PEAK_TESTS.format(budget="lots"))
    result = pytester.runpytest_subprocess()
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*peak='lots' is not a size such as 512MiB*"])


def test_a_baseline_is_written_then_holds_the_peak(pytester, monkeypatch):
    pytester.makepyfile(PEAK_TESTS.format(budget="64MiB"))
    first = pytester.runpytest_subprocess("--memseal-baseline=baselines")
    first.assert_outcomes(passed=1)
    first.stdout.fnmatch_lines(["*memseal: wrote 1 baseline(s) to baselines*"])
    assert len(list((pytester.path / "baselines").iterdir())) == 1
    pytester.runpytest_subprocess("--memseal-baseline=baselines").assert_outcomes(passed=1)
    monkeypatch.setenv("ELEMENTS", str(2 * 262144))
    grown = pytester.runpytest_subprocess("--memseal-baseline=baselines")
    grown.assert_outcomes(failed=1)
    grown.stdout.fnmatch_lines(["*memseal baseline: peak 1.0 MiB -> 2.0 MiB (+100%, tolerance "
                                "5.0%)*FAILED*", "*the peak grew from 1.0 MiB to 2.0 MiB*",
                                "*memseal diff (explain)*"])
    pytester.runpytest_subprocess("--memseal-baseline=baselines",
                                  "--memseal-tolerance=150%").assert_outcomes(passed=1)
    pytester.runpytest_subprocess("--memseal-baseline=baselines",
                                  "--memseal-update-baseline").assert_outcomes(passed=1)
    pytester.runpytest_subprocess("--memseal-baseline=baselines").assert_outcomes(passed=1)
    bad = pytester.runpytest_subprocess("--memseal-baseline=baselines", "--memseal-tolerance=x")
    assert bad.ret != 0
    bad.stderr.fnmatch_lines(["*tolerance 'x' is not a fraction*"])
    (written,) = (pytester.path / "baselines").iterdir()
    written.write_text("not a report")
    broken = pytester.runpytest_subprocess("--memseal-baseline=baselines")
    broken.assert_outcomes(failed=1)
    broken.stdout.fnmatch_lines(["*the baseline * cannot be compared with this run*"])
