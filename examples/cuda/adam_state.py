# Healthy: training with Adam on the GPU. The optimizer makes its state (two moments per
# parameter) at the first step and keeps it; memory rises once, then stays level.
#
#   python -m memseal check examples/cuda/adam_state.py
#   memseal run -- python examples/cuda/adam_state.py
import argparse
import os

import torch

# MEMSEAL_EXAMPLE_DEVICE=cpu tries the pattern without a GPU (the allocator's verdicts then differ).
DEVICE = os.environ.get("MEMSEAL_EXAMPLE_DEVICE", "cuda")

model = None
optimizer = None
total_loss = 0.0


def setup():
    global model, optimizer
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(512, 2048), torch.nn.ReLU(),
                                torch.nn.Linear(2048, 512)).to(DEVICE)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)


def step(i):
    global total_loss
    inputs = torch.randn(64, 512, device=DEVICE)
    loss = (model(inputs) - inputs).pow(2).mean()
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    total_loss += loss.item()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=200)
    args = parser.parse_args()
    setup()
    for i in range(args.steps):
        step(i)
    print(f"mean loss {total_loss / args.steps:.4f}")
