"""memseal.explain / fit / write_html and the memory_viz trace from Python: roles by identity,
modules from forward hooks, Python lines, capacity, the files, and `python -m memseal explain|fit`."""

import os
import pickle
import subprocess
import sys

import pytest
import torch

import memseal


def nbytes(tensors):
    return sum(t.untyped_storage().nbytes() for t in tensors)


def mlp(depth=3, width=256, inputs=128):
    layers = [torch.nn.Linear(inputs, width)]
    for _ in range(depth - 1):
        layers += [torch.nn.ReLU(), torch.nn.Linear(width, width)]
    return torch.nn.Sequential(*layers)


def test_training_step_roles_are_exact():
    torch.manual_seed(0)
    model = mlp(3, 512, 256)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)

    def step(i):
        optimizer.zero_grad()
        model(torch.randn(4, 256)).pow(2).mean().backward()
        optimizer.step()

    report = memseal.explain(step, model=model, optimizer=optimizer)
    parameters = list(model.parameters())
    assert report.bytes_of("parameters") == nbytes(parameters)
    assert report.bytes_of("gradients") == nbytes(p.grad for p in parameters)
    state = [v for s in optimizer.state.values() for v in s.values() if isinstance(v, torch.Tensor)]
    assert report.bytes_of("optimizer_state") == nbytes(state)
    assert sum(report.roles.values()) == report.peak_bytes
    assert list(report.roles) == list(memseal.ROLES)
    with pytest.raises(ValueError, match="no role"):
        report.bytes_of("weights")


def test_activations_go_to_modules_and_python_lines():
    torch.manual_seed(0)
    model = mlp(4, 128, 128)

    def forward_backward(i):
        model.zero_grad()
        model(torch.randn(1024, 128)).pow(2).mean().backward()

    report = memseal.explain(forward_backward, model=model)
    assert report.bytes_of("activations") >= 3 * 1024 * 128 * 4
    layer_modules = [m for m in report.modules if m["module"].startswith("Sequential/")]
    assert any(m["roles"].get("activations", 0) > 0 for m in layer_modules), report.modules
    files = {f["file"] for site in report.sites for f in site["frames"] if f["library"] == "python"}
    assert __file__ in files, files
    # The hooks are gone afterwards.
    assert not model._forward_pre_hooks and not model[0]._forward_hooks


def test_inference_has_no_gradients_state_or_activations():
    torch.manual_seed(0)
    model = mlp(3, 256, 256).eval()

    @torch.no_grad()
    def infer(i):
        model(torch.randn(64, 256)).sum().item()

    report = memseal.explain(infer, model=model)
    assert report.bytes_of("gradients") == 0
    assert report.bytes_of("optimizer_state") == 0
    assert report.bytes_of("activations") == 0
    assert report.bytes_of("parameters") == nbytes(model.parameters())


def test_explain_rejects_bad_arguments():
    with pytest.raises(TypeError, match="step"):
        memseal.explain(42)
    with pytest.raises(ValueError, match="must exceed warmup"):
        memseal.explain(lambda i: None, steps=2, warmup=2)
    with pytest.raises(ValueError, match="stacks"):
        memseal.explain(lambda i: None, stacks="sometimes")


class _Blocks(torch.nn.Module):
    """Four blocks and a head; `checkpointed` is the block whose forward is recomputed in
    backward."""

    def __init__(self, checkpointed=None):
        super().__init__()
        self.blocks = torch.nn.ModuleList(
            torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.ReLU(),
                                torch.nn.Linear(1024, 256), torch.nn.ReLU()) for _ in range(4))
        self.head = torch.nn.Linear(256, 10)
        self.checkpointed = checkpointed

    def forward(self, x):
        from torch.utils.checkpoint import checkpoint

        for index, block in enumerate(self.blocks):
            x = checkpoint(block, x, use_reentrant=False) if index == self.checkpointed else block(x)
        return self.head(x)


def _explain_blocks(checkpointed=None, set_to_none=True):
    torch.manual_seed(0)
    model = _Blocks(checkpointed)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    inputs, targets = torch.randn(512, 256), torch.randint(0, 10, (512,))

    def step(i):
        optimizer.zero_grad(set_to_none=set_to_none)
        torch.nn.functional.cross_entropy(model(inputs), targets).backward()
        optimizer.step()

    return memseal.explain(step, steps=4, warmup=2, model=model, optimizer=optimizer)


def test_what_would_lower_the_peak_is_what_applying_the_change_removes():
    before = _explain_blocks(set_to_none=False)
    remedies = {(r["kind"], r["target"]): r for r in before.remedies}
    assert [r["bytes"] for r in before.remedies] == sorted(
        (r["bytes"] for r in before.remedies), reverse=True)
    # Last step's gradients, kept (zeroed) through the forward, are at the peak.
    to_none = remedies[("gradients-to-none", "")]["bytes"]
    after = _explain_blocks(set_to_none=True)
    assert abs((before.peak_bytes - after.peak_bytes) - to_none) <= 0.10 * to_none, (
        before.peak_bytes, after.peak_bytes, to_none)
    # The second block's activations, checkpointed: its path is the model's class, then the
    # block's name.
    checkpoint = remedies[("checkpoint-module", "_Blocks/1")]["bytes"]
    after = _explain_blocks(checkpointed=1, set_to_none=False)
    assert abs((before.peak_bytes - after.peak_bytes) - checkpoint) <= 0.10 * checkpoint, (
        before.peak_bytes, after.peak_bytes, checkpoint)
    assert remedies[("lower-precision-activations", "")]["upper_bound"]
    text = before.text()
    assert "what would lower this peak" in text and "torch.utils.checkpoint" in text


def test_fit_predicts_a_linear_peak_beyond_the_measured_sizes():
    torch.manual_seed(0)
    model = mlp(3, 64, 64)

    def train(batch, i):
        model.zero_grad()
        model(torch.randn(batch, 64)).pow(2).mean().backward()

    report = memseal.fit(train, sizes=(128, 256, 384, 512), budget="1GiB")
    # The step is a line, and so is each of its phases: the model is the highest of them.
    assert report.model == "phases" and report.is_linear, report.text()
    assert report.limiting_phase and report.phases
    far = memseal.fit(train, sizes=(1536, 1537, 1538), budget="1GiB")
    measured = far.points[0][1]
    assert abs(report.predict_peak(1536) - measured) / measured < 0.05
    assert report.predicted_max_size > 512


def test_fit_follows_a_peak_that_moves_from_the_update_to_backward():
    # A new user's first try: an MLP of a few million parameters with Adam, sizes 16-128, a budget
    # with room for a few hundred rows. At these sizes the peak is in Adam's update (flat in the
    # batch); past them it is in forward and backward. The model is made inside the step, so fit
    # tracks every byte of it.
    torch.manual_seed(0)
    state = {}

    def train(batch, i):
        if not state:
            state["model"] = torch.nn.Sequential(
                torch.nn.Linear(1024, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 1024),
                torch.nn.ReLU(), torch.nn.Linear(1024, 10))
            state["optimizer"] = torch.optim.Adam(state["model"].parameters())
        loss = torch.nn.functional.cross_entropy(state["model"](torch.randn(batch, 1024)),
                                                 torch.randint(0, 10, (batch,)))
        state["optimizer"].zero_grad()
        loss.backward()
        state["optimizer"].step()

    report = memseal.fit(train, sizes=(16, 32, 64, 128), budget="48MiB", verify=True)
    assert report.model == "phases", report.text()
    assert report.phase_changes[0][1] == "update", report.phase_changes
    assert len(report.phase_changes) >= 2, report.text()
    assert 128 < report.predicted_max_size < 2000, report.text()
    verify = report.verify
    assert not verify["missed"], report.text()
    assert abs(verify["relative_error"]) < 0.03 and verify["within_budget"], report.text()
    assert report.largest_size == report.predicted_max_size and not report.largest_size_measured
    assert "extrapolated" not in report.text()  # verified, so not said
    assert "then in" in report.text()


def test_fit_verification_searches_when_the_prediction_misses():
    def step(size, i):
        if size > 700:  # what a real out-of-memory looks like to the caller
            raise torch.OutOfMemoryError("out of memory (test)")
        torch.empty(size * 1024).sum()

    report = memseal.fit(step, sizes=(32, 64, 96, 128), budget="8MiB", verify=True)
    verify = report.verify
    assert verify["missed"] and "out of memory (test)" in verify["error"]
    assert report.largest_size_measured and 693 <= report.largest_size <= 700, report.text()
    assert verify["smallest_failing_size"] > 700 and verify["searched"]
    assert "(measured peak" in report.text()
    unverified = memseal.fit(step, sizes=(32, 64, 96, 128), budget="8MiB")
    assert unverified.largest_size == unverified.predicted_max_size > 700
    assert "extrapolated:" in unverified.text()


def test_fit_refuses_what_it_cannot_extrapolate():
    with pytest.raises(ValueError, match="at least three sizes"):
        memseal.fit(lambda size, i: None, sizes=(1, 2))
    with pytest.raises(ValueError, match="not a size"):
        memseal.fit(lambda size, i: None, budget="lots")
    with pytest.raises(ValueError, match="'host', 'cuda' or 'cuda:N'"):
        memseal.fit(lambda size, i: None, memory="gpu")
    if not torch.cuda.is_available():
        # Nothing is reserved on a device the step does not use.
        with pytest.raises(ValueError, match="reserved no memory on cuda:0"):
            memseal.fit(lambda size, i: torch.zeros(size), memory="cuda:0", budget="1GiB")

    def attention(length, i):
        with torch.no_grad():
            q = torch.randn(length, 32)
            torch.softmax(q @ q.T, -1).sum().item()

    report = memseal.fit(attention, sizes=(128, 256, 512), budget="1GiB")
    assert not report.is_linear
    assert report.predicted_max_size is None and "fourth size" in report.refusal


def test_watch_writes_html_and_memory_viz(tmp_path):
    kept = []
    html, trace = tmp_path / "report.html", tmp_path / "trace.pickle"
    with memseal.watch(warmup=2, on_leak="none", html=html, memory_viz=trace) as w:
        for i in range(10):
            kept.append(torch.randn(32, 32))
            w.step()
    assert w.report().leak
    page = html.read_text()
    assert 'data-verdict="leak"' in page
    assert "http://" not in page and "https://" not in page
    with open(trace, "rb") as source:
        data = pickle.load(source)
    from torch.cuda import _memory_viz

    summary = _memory_viz.segsum(data)
    assert "total_allocated" in summary
    # CUDA devices, where the trace saw any, come first (torch indexes them by ordinal).
    cpu = data["memseal"]["devices"].index("cpu")
    allocs = [e for e in data["device_traces"][cpu] if e["action"] == "alloc"]
    assert len(allocs) >= 10
    with pytest.raises(ValueError, match="is a directory"):
        memseal.watch(html=tmp_path)


def test_write_html_needs_a_report(tmp_path):
    with pytest.raises(ValueError, match="needs a report"):
        memseal.write_html(tmp_path / "x.html")


def run_cli(*args):
    return subprocess.run([sys.executable, "-m", "memseal", *args], capture_output=True, text=True,
                          timeout=600)


def test_cli_explain(case_path, tmp_path):
    out = run_cli("explain", "--json", str(tmp_path / "e.json"), "--html", str(tmp_path / "e.html"),
                  case_path("explain_training.py"))
    assert out.returncode == 0, out.stderr
    assert "optimizer_state" in out.stdout
    assert '"schema": "memseal.explain/1"' in (tmp_path / "e.json").read_text()
    assert 'id="roles-chart"' in (tmp_path / "e.html").read_text()
    assert run_cli("explain", case_path("missing.py")).returncode == 2
    bad = run_cli("explain", "--steps", "2", "--warmup", "2", case_path("explain_training.py"))
    assert bad.returncode == 2 and "must exceed --warmup" in bad.stderr
    no_step = run_cli("explain", case_path("sized_mlp.py"))
    assert no_step.returncode == 2 and "defines no function step(i)" in no_step.stderr


def test_cli_fit(case_path, tmp_path):
    out = run_cli("fit", "--sizes", "128,256,384,512", "--budget", "256MiB", "--verify",
                  "--json", str(tmp_path / "f.json"), case_path("sized_mlp.py"))
    assert out.returncode == 0, out.stdout + out.stderr
    assert "model: phases" in out.stdout and "verify: size" in out.stdout
    for args, message in [
        (("--sizes", "1,2"), "at least three sizes"),
        (("--sizes", "a,b,c"), "expected positive integers"),
        (("--budget", "lots"), "expected a positive size"),
        (("--margin", "2"), "expected a fraction"),
        (("--memory", "gpu"), "expected host, cuda or cuda:N"),
        (("--memory", "cuda:3", "--budget", "1GiB"), "fit: the step reserved no memory on cuda:3"),
    ]:
        bad = run_cli("fit", *args, case_path("sized_mlp.py"))
        assert bad.returncode == 2 and message in bad.stderr, (args, bad.stderr)
        assert "memseal fit: memseal" not in bad.stderr, bad.stderr
    no_entry = run_cli("fit", case_path("explain_training.py"))
    assert no_entry.returncode == 2 and "sized_step(size, i)" in no_entry.stderr


def test_cli_check_writes_html_and_memory_viz(case_path, tmp_path):
    out = run_cli("check", "--steps", "12", "--warmup", "3", "--html", str(tmp_path / "c.html"),
                  "--memory-viz", str(tmp_path / "c.pickle"), case_path("cache_by_shape.py"))
    assert out.returncode in (0, 1), out.stderr
    assert os.path.getsize(tmp_path / "c.pickle") > 0
    assert 'id="verdict"' in (tmp_path / "c.html").read_text()
    bad = run_cli("check", "--html", str(tmp_path), case_path("healthy.py"))
    assert bad.returncode == 2 and "is a directory" in bad.stderr


def test_parameters_gradients_and_optimizer_state_count_under_the_module_that_owns_them():
    import torch

    import memseal

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 512), torch.nn.ReLU(), torch.nn.Linear(512, 8))
    optimizer = torch.optim.Adam(model.parameters())
    x = torch.randn(32, 64)

    def step(_):
        optimizer.zero_grad()
        model(x).sum().backward()
        optimizer.step()

    report = memseal.explain(step, model=model, optimizer=optimizer)
    modules = {entry["module"]: entry["roles"] for entry in report.modules}
    first = (64 * 512 + 512) * 4  # Linear(64, 512): weight and bias, float32
    assert modules["Sequential/0"].get("parameters") == first, modules
    # Adam: exp_avg and exp_avg_sq of each, and a 4-byte `step` per parameter (weight, bias).
    assert modules["Sequential/0"].get("optimizer_state") == 2 * first + 2 * 4, modules
    assert modules["Sequential/2"].get("parameters") == (512 * 8 + 8) * 4, modules
