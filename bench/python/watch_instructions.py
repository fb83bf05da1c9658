"""One Python training loop (overhead.py's MLP: 64-128-10, batch 32, Adam, one thread) under one
memseal mode, for bench/python/instruction_counts.sh, which counts its instructions under
callgrind at two step counts: the difference, per step, is the loop's steady cost in that mode.

    python bench/python/watch_instructions.py MODE STEPS

MODE: plain, default (Python lines), stacks-on, frames-off (native stacks, no Python lines),
hooks (a memseal.Scope with stacks and ops off: the allocation hooks alone)."""
import sys

import torch

import memseal

MODES = {
    "default": dict(python_frames=True),
    "stacks-on": dict(python_frames=True, stacks="on"),
    "frames-off": dict(python_frames=False),
}


def main():
    known = ("plain", "hooks", *MODES)
    if len(sys.argv) != 3 or sys.argv[1] not in known or not sys.argv[2].isdigit():
        sys.exit(f"usage: {sys.argv[0]} {'|'.join(known)} STEPS")
    mode, steps = sys.argv[1], int(sys.argv[2])
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))
    optimizer = torch.optim.Adam(model.parameters())
    inputs, targets = torch.randn(32, 64), torch.randint(0, 10, (32,))
    watch = scope = None
    if mode in MODES:
        watch = memseal.Watch(5, on_leak="none", find_holders=False, **MODES[mode]).start()
    elif mode == "hooks":
        scope = memseal.Scope("bench", on_survivors="none", stacks="off", observe_ops="off")
        scope.__enter__()
    for _ in range(steps):
        loss = torch.nn.functional.cross_entropy(model(inputs), targets)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if watch is not None:
            watch.step()
    if watch is not None:
        watch.finish()
    if scope is not None:
        scope.__exit__(None, None, None)


if __name__ == "__main__":
    main()
