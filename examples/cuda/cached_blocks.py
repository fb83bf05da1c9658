# Healthy: each step needs a large workspace for a moment (an attention score matrix). PyTorch's
# caching allocator keeps the freed blocks for the next step, so reserved memory (what nvidia-smi
# shows) stays high while allocated memory does not grow.
#
#   python -m memseal check examples/cuda/cached_blocks.py
#   memseal run -- python examples/cuda/cached_blocks.py
import argparse
import os

import torch

# MEMSEAL_EXAMPLE_DEVICE=cpu tries the pattern without a GPU (the allocator's verdicts then differ).
DEVICE = os.environ.get("MEMSEAL_EXAMPLE_DEVICE", "cuda")

queries = None


def setup():
    global queries
    torch.manual_seed(0)
    queries = torch.randn(8, 2048, 64, device=DEVICE)


def step(i):
    with torch.inference_mode():
        scores = queries @ queries.transpose(1, 2)  # 8 x 2048 x 2048: 128 MiB for a moment
        weights = scores.softmax(dim=-1)
        return (weights @ queries).norm().item()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=200)
    args = parser.parse_args()
    setup()
    for i in range(args.steps):
        step(i)
    print("done")
