"""One training step at a given batch size, for `python -m memseal fit`: activations, linear in
the batch, dominate the peak at the sizes tested."""

import torch

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 64))


def sized_step(batch, i):
    model.zero_grad()
    model(torch.randn(batch, 64)).pow(2).mean().backward()
