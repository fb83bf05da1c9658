"""A plain training loop with no memseal in it, which times its own loop (start-up excluded), for
bench/run_overhead_python.sh: a 64-128-10 MLP, batch 32, MSE loss, Adam, one thread.

    python bench/python/timed_training.py [STEPS]

Prints "training loop: STEPS steps in MS ms" on stderr."""
import sys
import time

import torch


def main():
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 3000
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))
    optimizer = torch.optim.Adam(model.parameters())
    total = 0.0
    started = time.perf_counter()
    for _ in range(steps):
        inputs, targets = torch.randn(32, 64), torch.randn(32, 10)
        loss = torch.nn.functional.mse_loss(model(inputs), targets)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        total += loss.item()
    elapsed_ms = (time.perf_counter() - started) * 1000
    print(f"training loop: {steps} steps in {elapsed_ms:.1f} ms", file=sys.stderr)


if __name__ == "__main__":
    main()
