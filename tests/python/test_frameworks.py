"""Programs written for a framework's own Trainer, run unmodified under `memseal run`: Hugging Face
transformers (a tiny GPT-2 from a config), Lightning, and a loop of the user's own on Accelerate.
The step is the framework's optimizer step, found through PyTorch's hooks; a healthy run is
silent; a leak added in one line is one finding, at the user's own line, with the user's container
named as its holder. Skipped where the framework is not installed (scripts/bootstrap.sh installs
them)."""

import importlib.util
import json
import os
import subprocess
import sys

import pytest

PROGRAMS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "programs")


def _run(tmp_path, program, *arguments):
    report_path = tmp_path / "run.json"
    command = [sys.executable, "-m", "memseal", "run", "--json", str(report_path), "--",
               sys.executable, os.path.join(PROGRAMS, program), *arguments]
    result = subprocess.run(command, capture_output=True, text=True, timeout=600, cwd=tmp_path)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    with open(report_path) as report:
        return json.load(report), output


def _healthy_phases(tmp_path, program, *arguments):
    """The phases of a run that must be healthy, by name, and its output."""
    report, output = _run(tmp_path, program, *arguments)
    assert report["verdict"] == "no_leak", output
    return {phase["name"]: phase for phase in report["phases"]}, output


def _user_line(finding, program):
    return next((f"{os.path.basename(frame['file'])}:{frame['line']}" for frame in finding["frames"]
                 if not frame["internal"] and os.path.basename(frame["file"] or "") == program),
                None)


def _holders(report):
    return [h["description"] for h in (report.get("python") or {}).get("holders", [])
            if h["finding"] == 0]


def _line_of(program, code):
    with open(os.path.join(PROGRAMS, program), encoding="utf-8") as source:
        return next(n for n, line in enumerate(source, 1) if code in line)


def _needs(module):
    return pytest.mark.skipif(importlib.util.find_spec(module) is None,
                              reason=f"{module} is not installed")


@_needs("transformers")
@_needs("accelerate")
@pytest.mark.parametrize("leak", ["none", "loss", "logits"])
def test_a_hugging_face_trainer_run(leak, tmp_path):
    report, output = _run(tmp_path, "hf_trainer.py", "--steps", "80", "--leak", leak)
    assert any("AdamW.step()" in line for line in report["steps_from"]), output
    if leak == "none":
        assert report["verdict"] == "no_leak", output
        return
    assert [f["category"] for f in report["findings"]] == ["autograd-graph-retained"], output
    # The line of the overridden compute_loss that made what is kept, not transformers' own.
    assert _user_line(report["findings"][0], "hf_trainer.py") is not None, output
    holders = _holders(report)
    assert holders and holders[0].startswith("list `KeepingTrainer.kept`, a class attribute"), output


@_needs("transformers")
@_needs("accelerate")
def test_a_hugging_face_trainer_evaluating_every_few_steps_has_a_phase_of_each(tmp_path):
    # eval_strategy="steps": 100 evaluation batches after every 40 optimizer steps, twice.
    phases, output = _healthy_phases(tmp_path, "hf_trainer.py", "--steps", "80",
                                     "--eval-every", "40")
    training = phases["optimizer steps (AdamW)"]
    assert training["runs"] == 2 and training["backward_ran"], output
    assert 75 <= training["steps"] <= 80, output
    evaluation = phases["batches (DataLoader over Subset)"]
    assert evaluation["runs"] == 2 and not evaluation["backward_ran"], output
    assert 150 <= evaluation["steps"] <= 200, output


@_needs("transformers")
@_needs("accelerate")
def test_a_hugging_face_trainer_predicting_after_training_has_a_phase_of_each(tmp_path):
    phases, output = _healthy_phases(tmp_path, "hf_trainer.py", "--steps", "60",
                                     "--predict", "60")
    assert phases["optimizer steps (AdamW)"]["backward_ran"], output
    prediction = phases["batches (DataLoader over Subset)"]
    assert prediction["runs"] == 1 and not prediction["backward_ran"], output


@_needs("accelerate")
@pytest.mark.parametrize("leak", ["none", "total"])
def test_an_accelerate_loop_without_a_trainer(leak, tmp_path):
    report, output = _run(tmp_path, "accelerate_loop.py", "--epochs", "2", "--batches", "100",
                          "--leak", leak)
    # The optimizer Accelerate wraps is the program's own, and its steps are training's.
    training = next(p for p in report["phases"] if p["name"] == "optimizer steps (AdamW)")
    assert training["runs"] == 2 and training["backward_ran"], output
    if leak == "none":
        assert report["verdict"] == "no_leak", output
        return
    findings = report["findings"]
    assert [f["category"] for f in findings] == ["autograd-graph-retained"], output
    line = _line_of("accelerate_loop.py", "# leak: total")
    assert _user_line(findings[0], "accelerate_loop.py") == f"accelerate_loop.py:{line}", output
    assert any(h.startswith("tensor `total_loss`") for h in _holders(report)), output
    # The total starts again from 0.0 each epoch: held, then freed, once per epoch.
    assert findings[0]["freed"]["times"] == 2, output


@_needs("lightning")
@pytest.mark.parametrize("leak", ["none", "loss", "epoch-outputs"])
def test_a_lightning_trainer_run(leak, tmp_path):
    report, output = _run(tmp_path, "lightning_trainer.py", "--batches", "150", "--epochs", "2",
                          "--leak", leak)
    assert any("SGD.step()" in line for line in report["steps_from"]), output
    if leak == "none":
        assert report["verdict"] == "no_leak", output
        return
    findings = report["findings"]
    assert [f["category"] for f in findings] == ["autograd-graph-retained"], output
    assert _user_line(findings[0], "lightning_trainer.py") is not None, output
    kept = ".losses" if leak == "loss" else ".outputs"
    holders = _holders(report)
    assert holders and f"{kept}` of Regressor" in holders[0], output
    # Predictions kept for an epoch and cleared at its end: held, then freed, every epoch, in the
    # phase of the training steps that kept them (never "outside loops").
    assert bool(findings[0].get("freed")) == (leak == "epoch-outputs"), output
    if leak == "epoch-outputs":
        assert findings[0]["freed"]["phase"] == "optimizer steps (SGD)", output
