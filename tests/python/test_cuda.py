"""CUDA loops from Python, on a real GPU (skipped where none is found): the seed patterns get the
same categories as on the CPU, with the CUDA tensor's device and the Python line; a healthy loop is
not flagged, and the device is reported."""

import inspect

import pytest
import torch

import memseal

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")

STEPS, WARMUP = 24, 4


def run(step):
    torch.ones(1, device="cuda")  # CUDA initialised before the detector starts
    return memseal.check(step, steps=STEPS, warmup=WARMUP, on_leak="none")


def test_accumulated_loss_on_the_gpu_keeps_autograd_history():
    model = torch.nn.Linear(64, 64).cuda()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    total = {"loss": 0}

    def step(i):
        loss = model(torch.randn(32, 64, device="cuda")).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        total["loss"] += loss

    report = run(step)
    assert report.leak, report.text()
    assert report.categories[0] == "autograd-graph-retained", report.text()


def test_outputs_kept_on_the_gpu_name_the_line_and_the_device():
    kept = []
    weight = torch.randn(512, 512, device="cuda")

    def step(i):
        kept.append((torch.randn(256, 512, device="cuda") @ weight).relu())

    report = run(step)
    assert report.leak, report.text()
    finding = report.findings[0]
    assert finding.category == "tensors-retained", report.text()
    assert finding.tensor.device == "cuda:0", report.text()
    assert list(finding.tensor.shape) == [256, 512], report.text()
    lines, start = inspect.getsourcelines(step)
    line = start + next(i for i, text in enumerate(lines) if "kept.append" in text)
    assert f"test_cuda.py:{line}" in report.text(), report.text()


def test_a_healthy_gpu_loop_is_not_flagged_and_the_device_is_reported():
    model = torch.nn.Linear(256, 256).cuda()

    def step(i):
        with torch.inference_mode():
            model(torch.randn(64, 256, device="cuda")).sum().item()

    report = run(step)
    assert not report.leak, report.text()
    assert "cuda:0" in report.text(), report.text()


def test_explain_on_the_gpu_counts_parameters_gradients_and_adam_state_to_the_byte():
    torch.ones(1, device="cuda")
    model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(),
                                torch.nn.Linear(512, 128)).cuda()
    optimizer = torch.optim.Adam(model.parameters())

    def step(i):
        loss = model(torch.randn(64, 256, device="cuda")).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

    report = memseal.explain(step, steps=4, warmup=2, model=model, optimizer=optimizer)
    assert len(report.devices) == 1, report.text()
    device = report.devices[0]
    assert device["device"] == "cuda:0"
    roles = {role["role"]: role["bytes"] for role in device["roles"]}

    # Each of these tensors is a block of its own: its bytes as asked for, or rounded by the
    # allocator to 512 bytes, whichever the allocator's trace reports.
    def exact(tensors):
        tensors = list(tensors)
        return {sum(t.untyped_storage().nbytes() for t in tensors),
                sum((t.untyped_storage().nbytes() + 511) // 512 * 512 for t in tensors)}

    assert roles["parameters"] in exact(model.parameters()), report.text()
    assert roles["gradients"] in exact(p.grad for p in model.parameters()), report.text()
    state = [t for s in optimizer.state.values() for t in s.values()
             if torch.is_tensor(t) and t.is_cuda]
    assert roles["optimizer_state"] in exact(state), report.text()
    assert device["reserved_bytes"] >= device["allocated_bytes"] > 0
    assert "cuda:0 at its peak" in report.text()


def test_fit_on_the_gpu_predicts_the_largest_batch_whose_reserved_peak_fits():
    torch.ones(1, device="cuda")
    model = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.ReLU(),
                                torch.nn.Linear(4096, 1024)).cuda()
    optimizer = torch.optim.Adam(model.parameters())

    def sized_step(batch, i):
        loss = model(torch.randn(batch, 1024, device="cuda")).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

    report = memseal.fit(sized_step, sizes=(256, 512, 1024, 2048), budget="2GiB", verify=True,
                         memory="cuda:0")
    assert report.memory == "cuda:0"
    assert report.predicted_max_size is not None, report.text()
    assert "reserved peak of cuda:0" in report.text()
    # The prediction against the largest batch measured to fit, when the check searched.
    assert abs(report.predicted_max_size - report.largest_size) <= 0.05 * report.largest_size, \
        report.text()
