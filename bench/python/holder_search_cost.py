#!/usr/bin/env python3
"""What the holder search costs on a large heap: `memseal.check(step, steps=40)` on a loop that
keeps its losses in a list, beside N extra Python objects (small dicts holding a list and a
string), with find_holders off and on, one run each, in this order.

    ~/.cache/memseal/venv-torch-2.11.0/bin/python bench/python/holder_search_cost.py 1000000
"""
import sys
import time

import torch

import memseal


def main():
    extra = int(sys.argv[1]) if len(sys.argv) > 1 else 100000
    heap = [{"key": i, "value": [i, str(i)]} for i in range(extra)]  # noqa: F841 (the heap)
    model = torch.nn.Linear(64, 1)
    losses = []

    def step(i):
        losses.append(model(torch.randn(8, 64)).sum())

    for find in (False, True):
        start = time.perf_counter()
        report = memseal.check(step, steps=40, find_holders=find, on_leak="none")
        holder = report.holders[0].description if report.holders else "-"
        print(f"{extra} extra objects, find_holders={find}: {time.perf_counter() - start:.2f} s "
              f"({holder})")


if __name__ == "__main__":
    main()
