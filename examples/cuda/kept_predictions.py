# Inference on the GPU with autograd left on: every prediction kept for later carries its graph,
# so the activations of every batch stay on the device with it.
#
#   python -m memseal check examples/cuda/kept_predictions.py
#   memseal run -- python examples/cuda/kept_predictions.py
#
# The fix: run inference under `torch.inference_mode()` (or keep `prediction.detach().cpu()`).
import argparse
import os

import torch

# MEMSEAL_EXAMPLE_DEVICE=cpu tries the pattern without a GPU (the allocator's verdicts then differ).
DEVICE = os.environ.get("MEMSEAL_EXAMPLE_DEVICE", "cuda")

model = None
predictions = []


def setup():
    global model
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(512, 2048), torch.nn.GELU(),
                                torch.nn.Linear(2048, 16)).to(DEVICE).eval()


def step(i):
    batch = torch.randn(64, 512, device=DEVICE)
    predictions.append(model(batch).softmax(dim=1))  # the leak: grad is on


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=200)
    args = parser.parse_args()
    setup()
    for i in range(args.steps):
        step(i)
    print(f"{len(predictions)} predictions")
