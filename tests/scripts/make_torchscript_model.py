"""Saves a small TorchScript conv net (the core benchmark's model) to the path given."""
import sys

import torch


class ConvNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(3, 32, 3, padding=1)
        self.conv2 = torch.nn.Conv2d(32, 64, 3, padding=1)
        self.conv3 = torch.nn.Conv2d(64, 64, 3, padding=1)
        self.head = torch.nn.Linear(64, 10)

    def forward(self, x):
        x = torch.relu(self.conv1(x))
        x = torch.nn.functional.max_pool2d(torch.relu(self.conv2(x)), 2)
        x = torch.relu(self.conv3(x))
        return self.head(x.mean(dim=(2, 3)))


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: make_torchscript_model.py OUTPUT.pt")
    torch.manual_seed(0)
    torch.jit.script(ConvNet().eval()).save(sys.argv[1])
