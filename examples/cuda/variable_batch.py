# Healthy: training on batches of varying size (the last batch of an epoch, dynamic batching).
# Blocks of many sizes come and go; the caching allocator splits its segments and reserved memory
# may sit above what is allocated (fragmentation), but nothing is kept from step to step.
#
#   python -m memseal check examples/cuda/variable_batch.py
#   memseal run -- python examples/cuda/variable_batch.py
import argparse
import os

import torch

# MEMSEAL_EXAMPLE_DEVICE=cpu tries the pattern without a GPU (the allocator's verdicts then differ).
DEVICE = os.environ.get("MEMSEAL_EXAMPLE_DEVICE", "cuda")

model = None
optimizer = None
sizes = None


def setup():
    global model, optimizer, sizes
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.ReLU(),
                                torch.nn.Linear(1024, 10)).to(DEVICE)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    sizes = torch.randint(16, 1024, (100000,)).tolist()


def step(i):
    batch = sizes[i % len(sizes)]
    inputs = torch.randn(batch, 256, device=DEVICE)
    labels = torch.randint(0, 10, (batch,), device=DEVICE)
    loss = torch.nn.functional.cross_entropy(model(inputs), labels)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=200)
    args = parser.parse_args()
    setup()
    for i in range(args.steps):
        step(i)
    print("done")
