# A cache that keeps a view (reshape, transpose, slice) of each step's tensor.
import torch

views = {}


def step(i):
    x = torch.randn(64, 16) * 2
    views[i] = (x.reshape(-1, 4), x.t(), x[::2])
