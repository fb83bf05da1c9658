"""What the documentation's Python examples run against (pytest-markdown-docs).

The examples are written as a user writes them, about their own model and loop: `train_step`,
`loader`, `model`, `optimizer`. Here those are a small real model and loop, so every example runs
for real against the installed package, in a folder of its own (the files the examples write).
"""

import atexit
import os
import shutil
import tempfile

import pytest
import torch

import memseal

_STARTED_IN = os.getcwd()
_WORK_FOLDER = tempfile.mkdtemp(prefix="memseal-docs-")
os.chdir(_WORK_FOLDER)


@atexit.register
def _remove_work_folder():
    os.chdir(_STARTED_IN)
    shutil.rmtree(_WORK_FOLDER, ignore_errors=True)

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
loader = [torch.randn(16, 64) for _ in range(12)]


def train_step(batch):
    """One healthy training step: of step number `batch` (memseal.check's step(i)) or of a batch."""
    inputs = batch if isinstance(batch, torch.Tensor) else torch.randn(16, 64)
    loss = model(inputs).pow(2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    return loss.item()


def train(watch_or_size):
    """An epoch of training that steps a watch, or one step of a batch of the given size (fit)."""
    if isinstance(watch_or_size, int):
        return train_step(torch.randn(watch_or_size, 64))
    for batch in loader:
        train_step(batch)
        watch_or_size.step()


def evaluate(watch):
    with torch.no_grad():
        for batch in loader[:4]:
            model(batch)
            watch.step()


def normalize(image):
    return (image - image.mean()) / image.std()


def _globals():
    names = {
        "memseal": memseal, "pytest": pytest, "torch": torch, "model": model,
        "optimizer": optimizer, "opt": optimizer, "loader": loader, "epochs": 2,
        "train_step": train_step, "step": train_step, "train": train, "evaluate": evaluate,
        "normalize": normalize, "image": torch.rand(3, 32, 32),
    }
    return names


def pytest_markdown_docs_globals():
    # A report to compare against, as a user keeps one from an earlier run.
    if not os.path.exists("before.json"):
        with open("before.json", "w") as out:
            out.write(memseal.explain(train_step, model=model, optimizer=optimizer).to_json())
    return _globals()
