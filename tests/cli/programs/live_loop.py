"""A training loop for `memseal run --live`'s tests, steered by files so that a test decides when
things happen rather than guessing how long they take: it keeps every step's loss with its graph
(`total = total + loss`) only once --leak-when's file exists, and runs until --until's file
exists (or for --steps steps)."""
import argparse
import os

import torch

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=10**9)
parser.add_argument("--until", help="stop at the first step after this file exists")
parser.add_argument("--leak-when", help="keep each loss's graph once this file exists")
args = parser.parse_args()

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
total = 0.0
for step in range(args.steps):
    if args.until and os.path.exists(args.until):
        break
    loss = model(torch.randn(32, 64)).pow(2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    if args.leak_when and os.path.exists(args.leak_when):
        total = total + loss
    else:
        total += loss.item()
print(f"live_loop: {step + 1} steps")
