"""Whole programs under memseal.watch(): epochs of training and validation, with what a phase holds
freed when it ends. A total with its autograd history kept in train()'s locals, a total reset every
few batches and outputs kept by a validation pass with grad on are leaks, though their phase's end
frees them; predictions gathered without history for a metric are where memory went, not a leak."""

import inspect

import pytest
import torch

import memseal


def line_of(function, text):
    """The line number of the first line of `function`'s source containing `text`."""
    lines, start = inspect.getsourcelines(function)
    for offset, line in enumerate(lines):
        if text in line:
            return start + offset
    raise AssertionError(f"{text!r} not in {function.__name__}")


class Program:
    """A small training program: train() and evaluate() are functions with their own locals."""

    def __init__(self, watch, name_phases=True):
        torch.manual_seed(0)
        self.model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(),
                                         torch.nn.Linear(64, 10))
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.01)
        self.watch = watch
        self.name_phases = name_phases

    def loss_of(self, output):
        return torch.nn.functional.cross_entropy(output, torch.zeros(8, dtype=torch.long))

    def train(self, batches, keep_total, reset_every=0):
        if self.name_phases:
            self.watch.phase("train")
        total_loss = 0
        for batch in range(1, batches + 1):
            self.optimizer.zero_grad()
            loss = self.loss_of(self.model(torch.randn(8, 32)))
            loss.backward()
            self.optimizer.step()
            if keep_total:
                total_loss += loss  # the leak: every batch's graph stays behind the total
            else:
                total_loss += loss.item()
            if reset_every and batch % reset_every == 0:
                total_loss = 0
            self.watch.step()

    def evaluate(self, batches, grad_on=False, gather=False):
        if self.name_phases:
            self.watch.phase("validate")
        outputs = []
        with torch.set_grad_enabled(grad_on):
            for _ in range(batches):
                output = self.model(torch.randn(8, 32))
                if gather:
                    outputs.append(output if grad_on else output.argmax(1))
                self.watch.step()
        return len(outputs)


def watched(run, warmup=3):
    with memseal.watch(warmup=warmup, on_leak="none") as watch:
        run(Program(watch))
    return watch.report()


def test_a_total_kept_in_trains_locals_is_a_leak_though_returning_frees_it():
    def run(program):
        for _ in range(2):
            program.train(40, keep_total=True)
            program.evaluate(15)

    report = watched(run)
    assert report.leak, report.text()
    assert report.categories == ["autograd-graph-retained"], report.text()
    finding = report.findings[0]
    assert finding.freed is not None
    assert finding.freed.times == 2  # once per epoch
    assert finding.freed.phase == "train"
    line = line_of(Program.train, "total_loss += loss  #")
    assert f"test_phases.py:{line}" in report.text()
    assert [phase.name for phase in report.phases] == ["train", "validate"]
    assert report.phases[0].backward_ran and not report.phases[1].backward_ran


def test_a_total_reset_every_few_steps_is_one_finding_with_its_period():
    def run(program):
        program.name_phases = False
        program.train(120, keep_total=True, reset_every=20)

    report = watched(run)
    assert report.categories == ["autograd-graph-retained"], report.text()
    freed = report.findings[0].freed
    assert freed.times >= 3, report.text()
    assert abs(freed.steps_per_time - 20) < 4, report.text()
    assert "built up and freed together" in report.text()


def test_outputs_kept_by_a_validation_pass_with_grad_on_are_a_leak_of_that_phase():
    def run(program):
        for _ in range(2):
            program.train(30, keep_total=False)
            program.evaluate(15, grad_on=True, gather=True)

    report = watched(run)
    assert report.leak, report.text()
    assert report.categories[0] == "grad-enabled-inference", report.text()
    assert report.findings[0].freed.phase == "validate"


def test_predictions_gathered_without_history_are_a_note_not_a_leak():
    def run(program):
        for _ in range(2):
            program.train(30, keep_total=False)
            program.evaluate(20, gather=True)

    report = watched(run)
    assert not report.leak, report.text()
    notes = [note for note in report.notes if note.startswith("held for a while, then freed")]
    assert len(notes) == 1, report.text()
    assert f"test_phases.py:{line_of(Program.evaluate, 'outputs.append')}" in notes[0]


def test_the_fixed_program_is_not_flagged():
    def run(program):
        for _ in range(2):
            program.train(40, keep_total=False, reset_every=10)
            program.evaluate(15)

    report = watched(run)
    assert not report.leak, report.text()
    assert not [note for note in report.notes if "not a leak" in note]


kept = []


def test_a_leak_in_a_short_phase_is_found_against_that_phases_steps():
    def run(program):
        for _ in range(3):
            program.train(60, keep_total=False)
            program.watch.phase("validate")
            with torch.no_grad():
                for _ in range(8):
                    kept.append(program.model(torch.randn(8, 32)))
                    program.watch.step()

    try:
        report = watched(run)
    finally:
        kept.clear()
    assert report.leak, report.text()
    assert report.categories[0] == "tensors-retained", report.text()
    assert report.findings[0].steps_observed == 24  # the validation steps only
    assert report.findings[0].freed is None


def test_the_report_keeps_phases_and_what_was_freed_in_json():
    def run(program):
        for _ in range(2):
            program.train(30, keep_total=True)
            program.evaluate(10)

    report = watched(run)
    again = memseal.LeakReport.from_json(report.to_json())
    assert [p.name for p in again.phases] == [p.name for p in report.phases]
    assert again.findings[0].freed.times == report.findings[0].freed.times
    assert {sample.phase for sample in again.per_step} == {0, 1}


cache = []


def test_two_unrelated_mistakes_in_one_program_are_two_findings():
    def run(program):
        for _ in range(2):
            program.train(30, keep_total=False)
            program.watch.phase("validate")
            outputs = []
            for _ in range(15):
                output = program.model(torch.randn(8, 32))  # grad on: a graph per output
                outputs.append(output)
                cache.append(torch.randn(16).detach())  # a cache that is never cleared
                program.watch.step()

    try:
        report = watched(run)
    finally:
        cache.clear()
    assert report.leak, report.text()
    assert sorted(report.categories) == ["grad-enabled-inference", "tensors-retained"], report.text()


def test_a_phase_is_named_by_a_string():
    with memseal.watch(on_leak="none") as watch:
        with pytest.raises(TypeError, match="named by a string"):
            watch.phase(3)
        watch.phase("train")
        watch.step()
