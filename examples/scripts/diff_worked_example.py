# Two changes to one training step, each measured before and after with memseal.explain and
# compared with memseal.diff: what the change did to the peak, by role, module, line and op.
#
#   python examples/scripts/diff_worked_example.py [DIR]
#
#   (a) eager vs torch.compile (inductor; aot_eager where inductor cannot build on this machine)
#   (b) without vs with activation checkpointing of the middle blocks
#
# CPU only, synthetic data, nothing downloaded. The reports are written to DIR (a new temporary
# folder when none is given) as eager.json, compiled.json and checkpointed.json, so the same
# comparisons can be made again with `memseal diff DIR/eager.json DIR/compiled.json`.
import os
import sys
import tempfile
import time

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

import memseal

FEATURES, HIDDEN, BLOCKS, BATCH = 256, 1024, 4, 512


class Block(nn.Module):
    """A transformer block's feed-forward half: norm, widen, GELU, narrow, residual."""

    def __init__(self):
        super().__init__()
        self.norm = nn.LayerNorm(FEATURES)
        self.up = nn.Linear(FEATURES, HIDDEN)
        self.down = nn.Linear(HIDDEN, FEATURES)

    def forward(self, x):
        return x + self.down(nn.functional.gelu(self.up(self.norm(x))))


class Net(nn.Module):
    def __init__(self, checkpointed=False):
        super().__init__()
        self.blocks = nn.ModuleList(Block() for _ in range(BLOCKS))
        self.head = nn.Linear(FEATURES, 1)
        self.checkpointed = checkpointed

    def forward(self, x):
        for index, block in enumerate(self.blocks):
            middle = 0 < index < BLOCKS - 1
            if self.checkpointed and middle:
                # The block's activations are not kept for backward: it runs again there.
                x = checkpoint(block, x, use_reentrant=False)
            else:
                x = block(x)
        return self.head(x)


def batch(i):
    """Step i's inputs and targets: random, and the same in every run."""
    generator = torch.Generator().manual_seed(i)
    inputs = torch.randn(BATCH, FEATURES, generator=generator)
    return inputs, torch.randn(BATCH, 1, generator=generator)


def training_step(model, forward, optimizer):
    def step(i):
        inputs, targets = batch(i)
        loss = nn.functional.mse_loss(forward(inputs), targets)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    return step


def explain(name, folder, checkpointed=False, backend=None):
    """One run measured: a fresh model (the same weights every time), Adam, five steps of which
    the first two (compilation, the optimizer's state appearing) are warm-up."""
    torch.manual_seed(0)
    model = Net(checkpointed)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    forward = torch.compile(model, backend=backend) if backend is not None else model
    path = os.path.join(folder, name + ".json")
    memseal.explain(training_step(model, forward, optimizer), steps=5, warmup=2, model=model,
                    optimizer=optimizer, json_path=path)
    return path


def compiled_run(folder):
    """The compiled run, with inductor where it can build code here (a C++ compiler), else with
    aot_eager: the same graphs and autograd, no generated code."""
    try:
        torch.compile(lambda x: torch.sin(x) + 1)(torch.randn(8))
        backend = "inductor"
    except Exception as error:  # no working C++ compiler for inductor, and the like
        first_line = (str(error).strip().splitlines() or [type(error).__name__])[0]
        print(f"torch.compile (inductor) fails here: {first_line[:200]}")
        print("compiling with backend='aot_eager' instead")
        torch._dynamo.reset()
        backend = "aot_eager"
    return explain("compiled", folder, backend=backend), backend


def main():
    started = time.perf_counter()
    folder = sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp(prefix="memseal-diff-")
    os.makedirs(folder, exist_ok=True)
    torch.set_num_threads(min(2, torch.get_num_threads()))

    eager = explain("eager", folder)
    compiled, backend = compiled_run(folder)
    checkpointed = explain("checkpointed", folder, checkpointed=True)

    print(f"\n(a) eager vs torch.compile (backend {backend!r})\n")
    print(memseal.diff(eager, compiled).text())
    print("(b) without vs with activation checkpointing of blocks 1 to "
          f"{BLOCKS - 2} (use_reentrant=False)\n")
    print(memseal.diff(eager, checkpointed).text())
    print(f"reports in {folder}; {time.perf_counter() - started:.1f} s")


if __name__ == "__main__":
    main()
