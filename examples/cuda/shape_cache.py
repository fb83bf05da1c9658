# A model that caches a tensor on the GPU per input length (positional encodings), serving
# requests whose lengths never repeat: the cache grows with every new length and is never trimmed.
#
#   python -m memseal check examples/cuda/shape_cache.py
#   memseal run -- python examples/cuda/shape_cache.py
#
# The fix: bound the cache (an LRU of a few lengths), or bucket lengths to a few sizes.
import argparse
import math
import os

import torch

# MEMSEAL_EXAMPLE_DEVICE=cpu tries the pattern without a GPU (the allocator's verdicts then differ).
DEVICE = os.environ.get("MEMSEAL_EXAMPLE_DEVICE", "cuda")


class PositionalEncoding(torch.nn.Module):
    def __init__(self, width):
        super().__init__()
        self.width = width
        self.cache = {}

    def encoding(self, length, device):
        if length not in self.cache:
            positions = torch.arange(length, device=device, dtype=torch.float32).unsqueeze(1)
            scales = torch.exp(torch.arange(0, self.width, 2, device=device) *
                               (-math.log(10000.0) / self.width))
            table = torch.zeros(length, self.width, device=device)
            table[:, 0::2] = torch.sin(positions * scales)
            table[:, 1::2] = torch.cos(positions * scales)
            self.cache[length] = table
        return self.cache[length]

    def forward(self, tokens):
        return tokens + self.encoding(tokens.shape[1], tokens.device)


model = None


def setup():
    global model
    torch.manual_seed(0)
    model = torch.nn.Sequential(PositionalEncoding(256), torch.nn.Linear(256, 256)).to(
        DEVICE)


def step(i):
    length = 64 + 8 * i  # every request a new length
    with torch.inference_mode():
        return model(torch.randn(4, length, 256, device=DEVICE)).sum().item()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=200)
    args = parser.parse_args()
    setup()
    for i in range(args.steps):
        step(i)
    print(f"{len(model[0].cache)} cached encodings")
