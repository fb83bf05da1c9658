# Losses kept in a list with their history, in a loop whose batches vary in size: each step frees
# its activations, but the kept graphs' small objects sit between the freed blocks, so malloc can
# neither reuse nor return them and the process grows far faster than the losses' bytes.
import torch

torch.manual_seed(0)
layers = []
for _ in range(6):
    layers += [torch.nn.Linear(512, 512), torch.nn.ReLU()]
model = torch.nn.Sequential(*layers, torch.nn.Linear(512, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
losses = []


def step(i):
    loss = model(torch.randn(64 + (i % 7) * 8, 512)).pow(2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    losses.append(loss)
