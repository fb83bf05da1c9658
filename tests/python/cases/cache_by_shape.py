# Anchors cached per input size, with a new size every request: the cache never stops growing.
import torch


class AnchorGenerator:
    def __init__(self):
        self.cache = {}

    def anchors(self, size):
        if size not in self.cache:
            self.cache[size] = torch.zeros(size, size, 4)
        return self.cache[size]


generator = AnchorGenerator()


def step(i):
    anchors = generator.anchors(16 + i)
    return anchors.sum()
