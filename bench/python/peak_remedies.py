"""What `memseal.explain`'s "what would lower this peak" estimates, beside what applying the change
removes from the peak: four MLP blocks trained with SGD, zero_grad(set_to_none=False) first.

    python bench/python/peak_remedies.py

Prints a Markdown table (BENCHMARKS.md)."""
import torch
from torch.utils.checkpoint import checkpoint

import memseal


class Blocks(torch.nn.Module):
    def __init__(self, checkpointed=None):
        super().__init__()
        self.blocks = torch.nn.ModuleList(
            torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.ReLU(),
                                torch.nn.Linear(1024, 256), torch.nn.ReLU()) for _ in range(4))
        self.head = torch.nn.Linear(256, 10)
        self.checkpointed = checkpointed

    def forward(self, x):
        for index, block in enumerate(self.blocks):
            x = checkpoint(block, x, use_reentrant=False) if index == self.checkpointed else block(x)
        return self.head(x)


def explain(checkpointed=None, set_to_none=False, autocast=False):
    torch.manual_seed(0)
    model = Blocks(checkpointed)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    inputs, targets = torch.randn(512, 256), torch.randint(0, 10, (512,))

    def step(i):
        optimizer.zero_grad(set_to_none=set_to_none)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            loss = torch.nn.functional.cross_entropy(model(inputs), targets)
        loss.backward()
        optimizer.step()

    return memseal.explain(step, steps=4, warmup=2, model=model, optimizer=optimizer)


def main():
    torch.set_num_threads(1)
    before = explain()
    estimates = {(r["kind"], r["target"]): r for r in before.remedies}
    applied = {
        ("gradients-to-none", ""): explain(set_to_none=True),
        ("checkpoint-module", "Blocks/1"): explain(checkpointed=1),
        ("lower-precision-activations", ""): explain(autocast=True),
    }
    print(f"Peak before: {before.peak_bytes} bytes.\n")
    print("| remedy | estimated | removed when applied | difference |")
    print("|---|---|---|---|")
    for key, after in applied.items():
        remedy = estimates.get(key)
        removed = before.peak_bytes - after.peak_bytes
        if remedy is None:
            print(f"| {key[0]} {key[1]} | not offered | {removed} | |")
            continue
        bound = "up to " if remedy["upper_bound"] else ""
        print(f"| {key[0]} {key[1]} | {bound}{remedy['bytes']} | {removed} | "
              f"{100 * (removed - remedy['bytes']) / remedy['bytes']:+.1f}% |")


if __name__ == "__main__":
    main()
