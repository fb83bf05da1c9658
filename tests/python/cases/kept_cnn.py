# Outputs of a small CNN (convolutions, batch norm, pooling, a linear head) kept with grad enabled.
# Its activations are large enough that malloc serves them from their own pages: the resident
# memory that costs beyond the tensors is part of this leak, not a second one.
import torch
import torch.nn as nn

torch.manual_seed(0)
model = nn.Sequential(
    nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
    nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
    nn.Flatten(), nn.Linear(32 * 8 * 8, 10))
predictions = []


def step(i):
    predictions.append(model(torch.randn(8, 3, 32, 32)))
