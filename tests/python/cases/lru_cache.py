# functools.lru_cache over tensors: `maxsize` comes from the environment (MEMSEAL_TEST_LRU_MAXSIZE,
# "none" for no bound), keys drawn at random from a few hundred.
import functools
import os
import random

import torch

_maxsize = os.environ.get("MEMSEAL_TEST_LRU_MAXSIZE", "100")
_random = random.Random(0)


@functools.lru_cache(maxsize=None if _maxsize == "none" else int(_maxsize))
def positional_table(rows):
    return torch.randn(rows, 64)


def step(i):
    return positional_table(_random.randrange(16, 400)).sum().item()
