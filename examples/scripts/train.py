# A plain training script with no memseal in it, for `memseal run`:
#
#   memseal run -- python examples/scripts/train.py --leak total-loss
#
# --leak total-loss keeps every step's graph (`total_loss += loss`, the most common leak of all);
# --leak none is the fix (`total_loss += loss.item()`). --steps sets the iterations.
import argparse
import sys

import torch


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--leak", choices=["none", "total-loss"], default="none")
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--exit-code", type=int, default=0)
    args = parser.parse_args()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 1))
    optimizer = torch.optim.Adam(model.parameters())
    total_loss = 0
    for _ in range(args.steps):
        inputs, targets = torch.randn(32, 64), torch.randn(32, 1)
        loss = torch.nn.functional.mse_loss(model(inputs), targets)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        total_loss = total_loss + loss if args.leak == "total-loss" else total_loss + loss.item()
    print(f"mean loss {float(total_loss) / args.steps:.4f}")
    return args.exit_code


if __name__ == "__main__":
    sys.exit(main())
