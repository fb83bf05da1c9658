"""A plain training loop with no memseal in it, which times its own loop (start-up excluded), for
bench/run_overhead_python.sh: a 64-128-10 MLP, batch 32, MSE loss, Adam, one thread.

    python bench/python/timed_training.py [STEPS] [BLOCK]

Prints "training loop: STEPS steps in MS ms" on stderr, and with BLOCK "training block: BLOCK steps
in MS ms" for every BLOCK steps after it (kept in memory, printed at the end)."""
import sys
import time

import torch


def main():
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 3000
    block = int(sys.argv[2]) if len(sys.argv) > 2 else 0
    if steps <= 0 or block < 0:
        sys.exit("timed_training: STEPS must be positive and BLOCK at least 0")
    block_ends = []
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))
    optimizer = torch.optim.Adam(model.parameters())
    total = 0.0
    started = time.perf_counter()
    for step in range(1, steps + 1):
        inputs, targets = torch.randn(32, 64), torch.randn(32, 10)
        loss = torch.nn.functional.mse_loss(model(inputs), targets)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        total += loss.item()
        if block and step % block == 0:
            block_ends.append(time.perf_counter())
    elapsed_ms = (time.perf_counter() - started) * 1000
    print(f"training loop: {steps} steps in {elapsed_ms:.1f} ms", file=sys.stderr)
    block_start = started
    for block_end in block_ends:
        print(f"training block: {block} steps in {(block_end - block_start) * 1000:.3f} ms",
              file=sys.stderr)
        block_start = block_end


if __name__ == "__main__":
    main()
