# A module whose memory buffer is written in place every training step from an output with
# history: each write records CopySlices, so the buffer's graph chains every step's to the last.
import torch
import torch.nn as nn

torch.manual_seed(0)


class Memory(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = nn.Linear(16, 16)
        self.register_buffer("slots", torch.zeros(32, 16))

    def forward(self, x, i):
        h = self.encoder(x)
        self.slots[i % 32] = h.mean(0)
        return (h @ self.slots.t()).mean()


net = Memory()
optimizer = torch.optim.SGD(net.parameters(), lr=0.01)


def step(i):
    loss = net(torch.randn(8, 16), i)
    optimizer.zero_grad()
    loss.backward(retain_graph=True)
    optimizer.step()
