"""One Python training loop (overhead.py's MLP: 64-128-10, batch 32, Adam, one thread) under one
memseal mode of overhead.py, for bench/python/instruction_counts.sh, which counts it under
cachegrind at two step counts: the difference, per step, is the loop's steady cost in that mode.

    python bench/python/watch_instructions.py MODE STEPS

MODE: plain, default (Python lines), stacks-on, frames-off (native stacks, no Python lines),
hooks (a memseal.Scope with stacks and ops off: the allocation hooks alone)."""
import sys

import torch

from overhead import MemsealScope, MemsealWatch, Plain, mlp_training

MODES = {
    "plain": Plain,
    "default": lambda: MemsealWatch(True),
    "stacks-on": lambda: MemsealWatch(True, "on"),
    "frames-off": lambda: MemsealWatch(False),
    "hooks": MemsealScope,
}


def main():
    if len(sys.argv) != 3 or sys.argv[1] not in MODES or not sys.argv[2].isdigit():
        sys.exit(f"usage: {sys.argv[0]} {'|'.join(MODES)} STEPS")
    mode, steps = sys.argv[1], int(sys.argv[2])
    torch.set_num_threads(1)
    step = mlp_training()
    context = MODES[mode]()
    with context as watcher:
        for i in range(steps):
            step(i)
            watcher.step()
    if hasattr(context, "finish"):
        context.finish()


if __name__ == "__main__":
    main()
