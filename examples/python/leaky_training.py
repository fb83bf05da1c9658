# A training loop with the most common leak of all: the running loss keeps its autograd history,
# so every step's graph stays alive. Run it under memseal:
#
#   python -m memseal check examples/python/leaky_training.py
import torch

model = None
optimizer = None
total_loss = 0


def setup():
    global model, optimizer
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
    optimizer = torch.optim.Adam(model.parameters())


def step(i):
    global total_loss
    inputs, targets = torch.randn(32, 64), torch.randn(32, 1)
    loss = torch.nn.functional.mse_loss(model(inputs), targets)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    total_loss += loss  # the leak; `total_loss += loss.item()` is the fix
