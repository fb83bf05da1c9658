"""The leak detector from Python: the seed patterns get the right category, healthy loops that only
look like leaks are not flagged, findings name the Python line and what holds the leak."""

import collections
import gc
import importlib.util
import inspect
import json
import os
import sys

import pytest
import torch

import memseal

STEPS, WARMUP = 24, 4


def run(step, **options):
    options.setdefault("on_leak", "none")
    return memseal.check(step, steps=STEPS, warmup=WARMUP, **options)


def line_of(function, text):
    """The line number of the first line of `function`'s source containing `text`."""
    lines, start = inspect.getsourcelines(function)
    for offset, line in enumerate(lines):
        if text in line:
            return start + offset
    raise AssertionError(f"{text!r} not in {function.__name__}")


def small_model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(32, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))


# Module-level, so the holder is a named global.
losses = []


def test_accumulated_loss_keeps_autograd_history():
    model = small_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    total = {"loss": 0}

    def step(i):
        loss = model(torch.randn(16, 32)).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        total["loss"] += loss

    report = run(step)
    assert report.leak
    assert report.categories[0] == "autograd-graph-retained"
    assert "loss.item()" in report.findings[0].hint


def test_losses_in_a_list_are_found_with_the_line_and_the_list_that_holds_them():
    losses.clear()
    model = small_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)

    def step(i):
        loss = model(torch.randn(16, 32)).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss)

    report = run(step)
    holders = [h.description for h in report.holders if h.finding == 0]
    losses.clear()
    assert report.leak
    assert report.categories == ["autograd-graph-retained"]
    assert holders and holders[0].startswith("list `losses` (global of test_check.py)"), holders
    user_frames = [f for f in report.findings[0].site.frames if not f.is_internal]
    assert user_frames, report.text()
    assert user_frames[0].file == __file__
    assert user_frames[0].line == line_of(step, "model(torch.randn")
    assert f"test_check.py:{user_frames[0].line}" in report.text()


def test_python_lines_come_without_native_frames_unless_stacks_are_on():
    kept = []

    def step(i):
        kept.append(torch.randn(64, 64))

    by_default = memseal.check(step, steps=12, warmup=3, on_leak="none")
    with_native = memseal.check(step, steps=12, warmup=3, on_leak="none", stacks="on")
    kept.clear()
    line = line_of(step, "kept.append")
    for report in (by_default, with_native):
        assert report.leak, report.text()
        python = [f for f in report.findings[0].site.frames if f.library == "python"]
        assert python and python[0].line == line, report.text()
    # Python reports fold native frames: by default none is unwound; stacks="on" takes them too.
    python_libraries = {"python", "python stdlib", "torch", "memseal", "site-packages", "pytest"}
    assert all(f.library in python_libraries for f in by_default.findings[0].site.frames), \
        [(f.function, f.library) for f in by_default.findings[0].site.frames]
    assert any(f.library.endswith(".so") or ".so." in f.library
               for f in with_native.findings[0].site.frames), with_native.text()


def test_modules_built_every_step():
    heads = []

    def step(i):
        heads.append(torch.nn.Linear(64, 64))

    report = run(step)
    assert report.leak
    assert report.categories == ["parameters-created-per-step"]
    assert len(report.findings[0].parts) == 2  # weight and bias: one finding


def test_evaluation_with_grad_enabled_keeps_outputs_and_activations():
    model = small_model()
    outputs = []

    def step(i):
        outputs.append(model(torch.randn(16, 32)))

    report = run(step)
    assert report.leak
    assert report.categories == ["grad-enabled-inference"]
    assert "inference_mode" in report.findings[0].hint
    holders = [h for h in report.holders if h.finding == 0]
    assert holders and "`outputs`" in holders[0].description, report.text()


def test_forward_hooks_registered_every_step():
    model = small_model()
    features = []

    def step(i):
        model[0].register_forward_hook(lambda module, inputs, output: features.append(output.detach()))
        with torch.no_grad():
            model(torch.randn(16, 32))

    report = run(step)
    assert report.leak
    assert report.categories[0] == "tensors-retained"


def load_case(name):
    from conftest import load_case as load

    return load(name)


def test_cache_keyed_by_input_shape_names_the_dict_and_its_owner():
    case = load_case("cache_by_shape.py")
    report = run(case.step)
    assert report.leak
    assert report.categories == ["tensors-retained"]
    assert report.findings[0].shapes.distinct > 10
    holders = [h.description for h in report.holders if h.finding == 0]
    assert holders == ["dict `generator.cache` of AnchorGenerator (global of cache_by_shape.py)"]
    case.generator.cache.clear()


running_total = None


def test_graph_only_leak_names_the_tensor_whose_history_holds_it():
    global running_total
    model = small_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    running_total = torch.zeros(())

    def step(i):
        global running_total
        loss = model(torch.randn(16, 32)).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        running_total = running_total + loss

    report = run(step)
    assert report.categories[0] == "autograd-graph-retained"
    described = " ".join(h.description for h in report.holders if h.finding == 0)
    assert "`running_total`" in described, report.text()
    running_total = None


history = []


def test_the_holder_names_the_container_a_root_names():
    history.clear()

    def step(i):
        history.append({"features": torch.randn(64)})

    report = run(step)
    holders = [h.description for h in report.holders if h.finding == 0]
    history.clear()
    assert holders == ["dict in list `history` (global of test_check.py)"], holders


def test_a_malformed_python_section_is_a_value_error():
    report = run(lambda i: None)
    data = json.loads(report.to_json())
    data["python"] = {"holders": [{"finding": 0}]}
    with pytest.raises(ValueError, match="python"):
        memseal.LeakReport.from_json(json.dumps(data))


errors = []


def load_batch(i):
    batch = torch.randn(256)  # kept alive by the traceback of the exception below
    raise ValueError(f"batch {i} is corrupt")


def test_tensors_kept_by_the_traceback_of_a_caught_exception():
    errors.clear()

    def step(i):
        try:
            load_batch(i)
        except ValueError as error:
            errors.append(error)

    report = run(step)
    holders = [h.description for h in report.holders if h.finding == 0]
    errors.clear()
    assert report.leak and report.categories == ["tensors-retained"]
    assert holders and holders[0].startswith(
        "the traceback of a caught ValueError (local `batch` of load_batch), kept in `errors` "
        "(global of test_check.py)"), holders


# Healthy loops that only look like leaks.


def test_adam_state_created_lazily_is_not_a_leak():
    model = small_model()
    optimizer = torch.optim.Adam(model.parameters())

    def step(i):
        loss = model(torch.randn(16, 32)).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

    assert not run(step).leak


def test_inference_mode_outputs_in_a_bounded_deque_are_not_a_leak():
    model = small_model()
    recent = collections.deque(maxlen=4)

    def step(i):
        with torch.inference_mode():
            recent.append(model(torch.randn(16, 32)))

    assert not run(step).leak


def test_detached_outputs_in_a_bounded_deque_are_not_a_leak():
    model = small_model()
    recent = collections.deque(maxlen=3)

    def step(i):
        recent.append(model(torch.randn(16, 32)).detach())

    assert not run(step).leak


def test_gradient_accumulation_is_not_a_leak():
    model = small_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)

    def step(i):
        loss = model(torch.randn(16, 32)).pow(2).mean() / 4
        loss.backward()
        if i % 4 == 3:
            optimizer.step()
            optimizer.zero_grad()

    assert not run(step).leak


def test_variable_batch_sizes_are_not_a_leak():
    model = small_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    sizes = [3, 17, 64, 5, 33, 128, 9]

    def step(i):
        loss = model(torch.randn(sizes[i % len(sizes)], 32)).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

    assert not run(step).leak


def test_warm_up_that_compiles_with_torchscript_is_not_a_leak():
    model = small_model().eval()
    compiled = {}

    def step(i):
        if "model" not in compiled:
            compiled["model"] = torch.jit.trace(model, torch.randn(16, 32))
        with torch.no_grad():
            compiled["model"](torch.randn(16, 32))

    assert not run(step).leak


class Node:
    def __init__(self, tensor):
        self.tensor = tensor
        self.me = self  # a reference cycle: only the garbage collector frees it


def test_native_frames_of_memseal_and_the_interpreter_are_never_the_users():
    kept = []

    def step(i):
        kept.append(torch.randn(64, 64))

    report = memseal.check(step, steps=12, warmup=3, on_leak="none", stacks="on",
                           python_frames=False)
    kept.clear()
    assert report.leak, report.text()
    frames = report.findings[0].site.frames
    assert any("_memseal" in f.library for f in frames), [(f.function, f.library) for f in frames]
    for frame in frames:
        if frame.is_internal:
            continue
        assert "_memseal" not in frame.library and "memseal/src/" not in frame.file, report.text()
        assert not frame.file.endswith("ceval.c"), report.text()
        assert not os.path.basename(frame.library).startswith(("python", "libpython")), \
            report.text()


class KeepsItsOutput(torch.autograd.Function):
    """Keeps its output on ctx: output -> grad_fn -> ctx -> output, a cycle every call."""

    @staticmethod
    def forward(ctx, x):
        out = x * 2
        ctx.out = out
        return out

    @staticmethod
    def backward(ctx, grad):
        return grad * 2


def test_tensors_the_garbage_collector_frees_now_and_then_are_garbage_not_a_leak():
    # Each step leaves a cycle that the collector frees every hundred steps or so: the memory
    # rises and falls like a running total reset by the program, but the collector frees it.
    assert gc.isenabled()
    model = torch.nn.Linear(64, 64)

    def step(i):
        KeepsItsOutput.apply(model(torch.randn(32, 64))).pow(2).mean().backward()

    report = memseal.check(step, steps=500, warmup=5, on_leak="none")
    assert not report.leak, report.text()
    collected = [n for n in report.notes if "freed by Python's garbage collector" in n]
    assert collected, report.text()
    assert any("times, every ~" in n for n in collected), report.text()


def test_tensors_kept_only_by_reference_cycles_are_cycle_garbage_not_a_leak():
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        def step(i):
            Node(torch.randn(64, 64))

        report = run(step)
    finally:
        if was_enabled:
            gc.enable()
    assert not report.leak, report.text()
    assert report.cycle_garbage is not None
    assert report.cycle_garbage.tensors >= STEPS - WARMUP
    assert any(name == "Node" for name, _ in report.cycle_garbage.types)
    assert "tensors-retained" in report.cycle_garbage.findings
    assert "reference cycles" in report.text()


# The API.


def test_watch_over_the_callers_own_loop_and_json_round_trip():
    kept = []
    with memseal.watch(warmup=3, on_leak="none") as w:
        for i in range(20):
            kept.append(torch.randn(128))
            w.step()
    report = w.report()
    assert report.leak and report.categories == ["tensors-retained"]
    data = report.to_json()
    assert data.lstrip().startswith('{\n  "schema": "memseal.check/1"')
    again = memseal.LeakReport.from_json(data)
    assert again.categories == report.categories
    assert [h.description for h in again.holders] == [h.description for h in report.holders]


def test_step_calls_the_core_while_the_watch_runs_and_says_why_it_cannot_otherwise():
    w = memseal.Watch(warmup=2, on_leak="none")
    with pytest.raises(RuntimeError, match="not started"):
        w.step()
    with w:
        kept_boundary = w.step
        for i in range(6):
            torch.randn(64)
            w.step()
    assert w.report().steps == 6
    with pytest.raises(RuntimeError, match="has ended"):
        w.step()
    with pytest.raises(RuntimeError, match="already finished"):
        kept_boundary()
    with pytest.raises(TypeError):
        kept_boundary(1)

    failed = memseal.Watch(warmup=2, on_leak="none")
    with pytest.raises(KeyError):
        with failed:
            failed.step()
            raise KeyError("the loop failed")
    with pytest.raises(RuntimeError, match="has ended"):
        failed.step()


def test_a_subclass_that_overrides_step_keeps_its_override():
    class CountingWatch(memseal.Watch):
        steps_seen = 0

        def step(self):
            self.steps_seen += 1
            super().step()

    with CountingWatch(warmup=2, on_leak="none") as w:
        for i in range(5):
            torch.randn(64)
            w.step()
    assert w.steps_seen == 5 and w.report().steps == 5


def test_a_step_boundary_keeps_its_detector_watching():
    boundary = memseal._memseal.Detector(2, [], False, False).step_boundary
    gc.collect()
    assert memseal._memseal.tracking_active()
    for i in range(3):
        boundary()
    del boundary
    gc.collect()
    assert not memseal._memseal.tracking_active()


def test_a_running_watchs_step_refuses_arguments_by_its_own_name():
    with memseal.watch(warmup=2) as w:
        w.step()
        with pytest.raises(TypeError, match=r"Watch\.step\(\) takes no arguments \(1 given\)"):
            w.step(1)
        with pytest.raises(TypeError, match=r"Watch\.step\(\) takes no arguments \(2 given\)"):
            w.step(1, loss=2.0)
        w.step()
    assert w.report().steps == 2


def test_policies():
    def leaky(i, kept=[]):  # noqa: B006 (the leak)
        kept.append(torch.randn(256))

    with pytest.raises(memseal.LeakError) as raised:
        memseal.check(leaky, steps=16, warmup=2, on_leak="raise")
    assert raised.value.report.leak
    seen = []
    memseal.check(leaky, steps=16, warmup=2, on_leak="callback", callback=seen.append)
    assert len(seen) == 1 and seen[0].leak


def test_bad_options_say_what_they_accept():
    with pytest.raises(ValueError, match="sample:N"):
        memseal.check(lambda i: None, stacks="sometimes")
    with pytest.raises(ValueError, match="on_leak"):
        memseal.check(lambda i: None, on_leak="explode")
    with pytest.raises(ValueError, match="steps"):
        memseal.check(lambda i: None, steps=0)
    with pytest.raises(TypeError, match="step"):
        memseal.check(None)


def test_the_former_name_of_watch_ops_is_still_taken_and_says_so():
    with pytest.warns(DeprecationWarning, match="watch_ops"):
        with pytest.raises(ValueError, match="every:N"):
            memseal.check(lambda i: None, observe_ops="every:0")
    with pytest.warns(DeprecationWarning, match="watch_ops"):
        report = memseal.check(lambda i: None, steps=8, warmup=2, on_leak="none",
                               observe_ops="off")
    assert "ops not watched" in report.to_json()


def test_an_exception_in_the_loop_passes_through_and_stops_tracking():
    def step(i):
        if i == 3:
            raise KeyError("boom")

    with pytest.raises(KeyError):
        memseal.check(step, steps=10, warmup=2)
    assert not memseal._memseal.tracking_active()
