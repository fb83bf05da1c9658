"""An MLP trained with Adam, for `python -m memseal explain`: `model` and `optimizer` are named by
identity; the module hooks attribute activations to layers."""

import torch

model = None
optimizer = None


def setup():
    global model, optimizer
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 512), torch.nn.ReLU(),
        torch.nn.Linear(512, 10),
    )
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)


def step(i):
    optimizer.zero_grad()
    loss = model(torch.randn(64, 256)).pow(2).mean()
    loss.backward()
    optimizer.step()
