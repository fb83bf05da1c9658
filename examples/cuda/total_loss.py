# Training on the GPU with the most common leak of all: the running total keeps every step's
# autograd graph, and the activations each graph saved, on the device.
#
#   python -m memseal check examples/cuda/total_loss.py      # as a case: setup(), step(i)
#   memseal run -- python examples/cuda/total_loss.py        # unmodified, its own loop
#
# The fix: `total_loss += loss.item()` (or `loss.detach()`).
import argparse
import os

import torch

# MEMSEAL_EXAMPLE_DEVICE=cpu tries the pattern without a GPU (the allocator's verdicts then differ).
DEVICE = os.environ.get("MEMSEAL_EXAMPLE_DEVICE", "cuda")

model = None
optimizer = None
total_loss = 0


def setup():
    global model, optimizer
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.ReLU(),
                                torch.nn.Linear(1024, 1)).to(DEVICE)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)


def step(i):
    global total_loss
    inputs = torch.randn(128, 256, device=DEVICE)
    targets = torch.randn(128, 1, device=DEVICE)
    loss = torch.nn.functional.mse_loss(model(inputs), targets)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    total_loss += loss  # the leak


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=200)
    args = parser.parse_args()
    setup()
    for i in range(args.steps):
        step(i)
    print(f"mean loss {float(total_loss) / args.steps:.4f}")
