"""A training loop written for Hugging Face Accelerate without its Trainer, as Accelerate's own
examples write one: the model, optimizer and loader go through `Accelerator.prepare`, the backward
pass through `accelerator.backward`, and each epoch ends with an evaluation pass over a second
loader under `torch.no_grad()`. --leak total adds the step's loss to a running total kept with its
graph (`total_loss += loss`, the classic mistake: the fix is `loss.item()` or `loss.detach()`)."""
import argparse

import torch
from accelerate import Accelerator

parser = argparse.ArgumentParser()
parser.add_argument("--leak", choices=("none", "total"), default="none")
parser.add_argument("--epochs", type=int, default=2)
parser.add_argument("--batches", type=int, default=100)
args = parser.parse_args()

torch.manual_seed(0)


class Pairs(torch.utils.data.Dataset):
    def __init__(self, size, seed):
        generator = torch.Generator().manual_seed(seed)
        self.inputs = torch.randn(size, 16, generator=generator)
        self.targets = self.inputs.sum(dim=1, keepdim=True)

    def __len__(self):
        return len(self.inputs)

    def __getitem__(self, index):
        return self.inputs[index], self.targets[index]


accelerator = Accelerator(cpu=True)
model = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
train_loader = torch.utils.data.DataLoader(Pairs(8 * args.batches, 0), batch_size=8, shuffle=True)
eval_loader = torch.utils.data.DataLoader(Pairs(8 * args.batches // 2, 1), batch_size=8)
model, optimizer, train_loader, eval_loader = accelerator.prepare(
    model, optimizer, train_loader, eval_loader)

for epoch in range(args.epochs):
    model.train()
    total_loss = 0.0
    for inputs, targets in train_loader:
        loss = torch.nn.functional.mse_loss(model(inputs), targets)
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
        if args.leak == "total":
            total_loss += loss  # leak: total
        else:
            total_loss += loss.item()
    model.eval()
    errors = []
    with torch.no_grad():
        for inputs, targets in eval_loader:
            errors.append(torch.nn.functional.mse_loss(model(inputs), targets).item())
    accelerator.print(f"epoch {epoch}: train {float(total_loss) / len(train_loader):.4f}, "
                      f"eval {sum(errors) / len(errors):.4f}")
