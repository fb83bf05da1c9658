# A residual network (convolutions, batch norm, residual adds, dropout, layer norm, softmax) in
# training mode whose outputs are kept with grad enabled: one mistake, one finding.
import torch
import torch.nn as nn
import torch.nn.functional as F
torch.manual_seed(0)
class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c1 = nn.Conv2d(c, c, 3, padding=1, bias=False); self.b1 = nn.BatchNorm2d(c)
        self.c2 = nn.Conv2d(c, c, 3, padding=1, bias=False); self.b2 = nn.BatchNorm2d(c)
    def forward(self, x):
        y = F.relu(self.b1(self.c1(x)))
        y = self.b2(self.c2(y))
        return F.relu(x + y)
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 16, 3, padding=1)
        self.blocks = nn.Sequential(Block(16), Block(16))
        self.drop = nn.Dropout(0.1)
        self.norm = nn.LayerNorm(16)
        self.head = nn.Linear(16, 10)
    def forward(self, x):
        x = self.blocks(F.relu(self.stem(x)))
        x = F.adaptive_avg_pool2d(x, 1).flatten(1)
        x = self.norm(self.drop(x))
        return F.softmax(self.head(x), dim=-1)
model = Net()
model.train()
scores = []
def step(i):
    scores.append(model(torch.randn(4, 3, 24, 24)))
