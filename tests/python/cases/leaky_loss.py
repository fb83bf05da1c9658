# A `python -m memseal check` case: the loss is summed with its autograd history.
import torch

model = None
optimizer = None
total_loss = 0


def setup():
    global model, optimizer
    torch.manual_seed(0)
    model = torch.nn.Linear(16, 4)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)


def step(i):
    global total_loss
    loss = model(torch.randn(8, 16)).pow(2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    total_loss += loss  # the leak: keeps every step's graph
