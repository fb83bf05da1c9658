"""memseal.watch on Python loops, as a ratio to the plain loop, beside tracemalloc and memray.

    <venv>/bin/python bench/python/overhead.py [--rounds 7] [--steps 200]

Every round runs each mode once on the same loop, in a rotating order (interleaved, so a noisy
machine slows all modes alike); the ratio of a round is the mode's time over the plain loop's in
that round, and the median over rounds is reported. Only the loop is timed: starting and
finishing the watch (the report, the holder search) are outside. memray is optional: found on
sys.path or in MEMSEAL_BENCH_PACKAGES (bench/python/run.sh installs it there, outside the venv).
"""

import argparse
import gc
import os
import statistics
import sys
import tempfile
import time
import tracemalloc

if os.environ.get("MEMSEAL_BENCH_PACKAGES"):
    sys.path.append(os.environ["MEMSEAL_BENCH_PACKAGES"])

import torch

import memseal

try:
    import memray
except ImportError:
    memray = None


def mlp_training():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))
    optimizer = torch.optim.Adam(model.parameters())
    inputs, targets = torch.randn(32, 64), torch.randint(0, 10, (32,))

    def step(i):
        loss = torch.nn.functional.cross_entropy(model(inputs), targets)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

    return step


def cnn_inference():
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 16, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(16, 32, 3, padding=1), torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(1),
        torch.nn.Flatten(), torch.nn.Linear(32, 10)).eval()
    images = torch.randn(8, 3, 64, 64)

    def step(i):
        with torch.inference_mode():
            model(images)

    return step


class Plain:
    def __enter__(self):
        return self

    def step(self):
        pass

    def __exit__(self, *exc):
        return False


class MemsealWatch:
    def __init__(self, python_frames):
        self.watch = memseal.Watch(5, on_leak="none", python_frames=python_frames,
                                   find_holders=False)

    def __enter__(self):
        self.watch.start()
        return self.watch

    def __exit__(self, *exc):
        return False

    def finish(self):
        self.watch.finish()


class Tracemalloc(Plain):
    def __enter__(self):
        tracemalloc.start()
        return self

    def finish(self):
        tracemalloc.stop()


class Memray(Plain):
    def __enter__(self):
        self.path = tempfile.mktemp(suffix=".bin")
        self.tracker = memray.Tracker(self.path)
        self.tracker.__enter__()
        return self

    def finish(self):
        self.tracker.__exit__(None, None, None)
        os.remove(self.path)


def modes():
    result = {
        "plain": Plain,
        "memseal.watch, Python frames off": lambda: MemsealWatch(False),
        "memseal.watch, Python frames on": lambda: MemsealWatch(True),
        "tracemalloc": Tracemalloc,
    }
    if memray is not None:
        result["memray"] = Memray
    return result


def run(step, make, steps):
    gc.collect()
    context = make()
    with context as watcher:
        start = time.perf_counter()
        for i in range(steps):
            step(i)
            watcher.step()
        elapsed = time.perf_counter() - start
    if hasattr(context, "finish"):
        context.finish()
    return elapsed


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--steps", type=int, default=200)
    args = parser.parse_args()
    torch.set_num_threads(1)
    print(f"# torch {torch.__version__}, memseal {memseal.__version__}, {args.rounds} rounds of "
          f"{args.steps} steps, 1 intra-op thread; median ratio to the plain loop (min..max)")
    for loop_name, make_loop in (("MLP + Adam training", mlp_training), ("CNN inference", cnn_inference)):
        step = make_loop()
        for i in range(20):  # warm the loop itself up
            step(i)
        names = list(modes())
        times = {name: [] for name in names}
        for round_index in range(args.rounds):
            order = names[round_index % len(names):] + names[:round_index % len(names)]
            for name in order:
                times[name].append(run(step, modes()[name], args.steps))
        print(f"\n{loop_name}: plain {statistics.median(times['plain']) / args.steps * 1e6:.0f} us/step")
        for name in names[1:]:
            ratios = [t / p for t, p in zip(times[name], times["plain"])]
            print(f"  {name:36s} {statistics.median(ratios):.2f}x  ({min(ratios):.2f}..{max(ratios):.2f})")


if __name__ == "__main__":
    main()
