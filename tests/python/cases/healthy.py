import torch

model = torch.nn.Linear(16, 4)
optimizer = torch.optim.Adam(model.parameters())
total_loss = 0.0


def step(i):
    global total_loss
    loss = model(torch.randn(8, 16)).pow(2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    total_loss += loss.item()
