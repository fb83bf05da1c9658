"""memseal.watch on Python loops, as a ratio to the plain loop, beside tracemalloc and memray, and
on a GPU beside PyTorch's own allocator recorder.

    <venv>/bin/python bench/python/overhead.py [--rounds 7] [--steps 200] [--device cpu|cuda]
                                               [--settle N] [--breakdown]
                                               [--loop training|inference] [--modes PART,...]
                                               [--bracketed]

On the CPU the loops are a small MLP's training and a small CNN's inference (one intra-op thread).
With --device cuda they are a ResNet-like network's training and inference at batch 64, and
torch.cuda.memory._record_memory_history(stacks="python") is one more mode; each timed loop ends
with torch.cuda.synchronize(), so the GPU's work is in the time.

Every round runs each mode once on the same loop, in a rotating order (interleaved, so a noisy
machine slows all modes alike); the ratio of a round is the mode's time over the plain loop's in
that round, and the median over rounds is reported. With --bracketed a plain run goes before and
after each mode's run instead, and the mode's ratio is its time over the mean of those two: on a
machine whose speed wanders within a round, the ratio then compares runs seconds apart, not a
round apart (a round then holds one plain run per mode, and one more). Only the loop is timed: starting and
finishing the watch (the report, the holder search) are outside. With --settle N the same rounds
also give the ratio of the steps after the first N alone (the steady state: memseal watches every
op through warm-up and the ten steps after it, then one step in 32, fewer while the loop
repeats). memray is optional: found on sys.path or in MEMSEAL_BENCH_PACKAGES
(bench/python/run.sh installs it there, outside the venv).
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


class BasicBlock(torch.nn.Module):
    def __init__(self, inputs, outputs, stride):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(inputs, outputs, 3, stride, 1, bias=False)
        self.bn1 = torch.nn.BatchNorm2d(outputs)
        self.conv2 = torch.nn.Conv2d(outputs, outputs, 3, 1, 1, bias=False)
        self.bn2 = torch.nn.BatchNorm2d(outputs)
        self.shortcut = torch.nn.Sequential()
        if stride != 1 or inputs != outputs:
            self.shortcut = torch.nn.Sequential(
                torch.nn.Conv2d(inputs, outputs, 1, stride, bias=False), torch.nn.BatchNorm2d(outputs))

    def forward(self, x):
        out = torch.relu(self.bn1(self.conv1(x)))
        return torch.relu(self.bn2(self.conv2(out)) + self.shortcut(x))


def resnet_like():
    """ResNet-18's shape for 32x32 images: a stem, four stages of two basic blocks, a linear head."""
    layers = [torch.nn.Conv2d(3, 64, 3, 1, 1, bias=False), torch.nn.BatchNorm2d(64), torch.nn.ReLU()]
    channels = 64
    for outputs, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
        layers += [BasicBlock(channels, outputs, stride), BasicBlock(outputs, outputs, 1)]
        channels = outputs
    layers += [torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(512, 10)]
    return torch.nn.Sequential(*layers).cuda()


def resnet_training():
    torch.manual_seed(0)
    model = resnet_like()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    images = torch.randn(64, 3, 32, 32, device="cuda")
    labels = torch.randint(0, 10, (64,), device="cuda")

    def step(i):
        loss = torch.nn.functional.cross_entropy(model(images), labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

    return step


def resnet_inference():
    torch.manual_seed(0)
    model = resnet_like().eval()
    images = torch.randn(64, 3, 32, 32, device="cuda")

    def step(i):
        with torch.inference_mode():
            model(images)

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
    def __init__(self, python_frames, stacks=None, watch_ops=None):
        self.watch = memseal.Watch(5, on_leak="none", python_frames=python_frames, stacks=stacks,
                                   watch_ops=watch_ops, find_holders=False)

    def __enter__(self):
        self.watch.start()
        return self.watch

    def __exit__(self, *exc):
        return False

    def finish(self):
        self.watch.finish()


class MemsealScope(Plain):
    """A lifetime scope around the whole loop: memseal's allocation hooks without step boundaries."""

    def __init__(self):
        self.scope = memseal.Scope("bench", on_survivors="none", stacks="off", watch_ops="off")

    def __enter__(self):
        self.scope.__enter__()
        return self

    def finish(self):
        self.scope.__exit__(None, None, None)


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


class TorchRecorder(Plain):
    """PyTorch's own allocator history, as its memory snapshots record it."""

    def __enter__(self):
        torch.cuda.memory._record_memory_history(stacks="python")
        return self

    def finish(self):
        torch.cuda.memory._record_memory_history(enabled=None)


def modes(device, breakdown=False):
    result = {
        "plain": Plain,
        "memseal.watch (default: Python lines)": lambda: MemsealWatch(True),
        "memseal.watch, stacks=on (+ native)": lambda: MemsealWatch(True, "on"),
        "memseal.watch, Python frames off (native)": lambda: MemsealWatch(False),
        "tracemalloc": Tracemalloc,
    }
    if breakdown:
        # What the default's cost is made of: without stacks, then without watching ops as well
        # (what is left is the allocation hooks and the step boundaries), then a lifetime scope
        # (the allocation hooks alone).
        result["memseal.watch, stacks=off"] = lambda: MemsealWatch(True, "off")
        result["memseal.watch, stacks=off, ops off"] = lambda: MemsealWatch(True, "off", "off")
        result["memseal.Scope, stacks=off, ops off"] = MemsealScope
    if memray is not None:
        result["memray"] = Memray
    if device == "cuda":
        result["torch recorder, stacks=python"] = TorchRecorder
    return result


def synchronize(device):
    if device == "cuda":
        torch.cuda.synchronize()


def run(step, make, steps, device, settle, boundaries=None):
    """Seconds for all `steps`, and for those after the first `settle` of them. With `boundaries`
    (a list), also appends the seconds spent in the step boundaries (watcher.step()) after the
    first `settle` steps."""
    gc.collect()
    context = make()
    in_boundaries = 0.0
    with context as watcher:
        synchronize(device)
        start = time.perf_counter()
        settled = start
        for i in range(steps):
            if i == settle:
                synchronize(device)
                settled = time.perf_counter()
            step(i)
            if boundaries is None:
                watcher.step()
            else:
                before = time.perf_counter()
                watcher.step()
                if i >= settle:
                    in_boundaries += time.perf_counter() - before
        synchronize(device)
        end = time.perf_counter()
    if hasattr(context, "finish"):
        context.finish()
    if boundaries is not None:
        boundaries.append(in_boundaries)
    return end - start, end - settled


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--settle", type=int, default=0,
                        help="also time the steps after the first N apart (0: no)")
    parser.add_argument("--breakdown", action="store_true",
                        help="also time memseal.watch without stacks, and without stacks or ops")
    parser.add_argument("--loop", choices=["both", "training", "inference"], default="both",
                        help="time one of the two loops only")
    parser.add_argument("--modes", default="",
                        help="comma-separated parts of mode names: time only the modes whose name "
                             "holds one (the plain loop always), e.g. 'default,frames off'")
    parser.add_argument("--bracketed", action="store_true",
                        help="run the plain loop before and after each mode's run and take the "
                             "mode's ratio to the mean of those two (one plain run per mode)")
    args = parser.parse_args()
    if not 0 <= args.settle < args.steps:
        parser.error("--settle must be at least 0 and less than --steps")
    if args.device == "cuda":
        if not torch.cuda.is_available():
            print("overhead.py: no CUDA device here; nothing measured")
            return
        loops = (("ResNet-like training, batch 64", resnet_training),
                 ("ResNet-like inference, batch 64", resnet_inference))
        where = torch.cuda.get_device_name(0)
    else:
        torch.set_num_threads(1)
        loops = (("MLP + Adam training", mlp_training), ("CNN inference", cnn_inference))
        where = "CPU, 1 intra-op thread"
    loops = [(name, make) for name, make in loops if args.loop == "both" or args.loop in name]
    wanted = [part.strip() for part in args.modes.split(",") if part.strip()]
    chosen = [name for name in modes(args.device, args.breakdown)
              if name != "plain" and (not wanted or any(part in name for part in wanted))]
    if not chosen:
        sys.exit(f"overhead.py: no mode's name holds any of {wanted}")
    print(f"# torch {torch.__version__}, memseal {memseal.__version__}, {args.rounds} rounds of "
          f"{args.steps} steps, {where}; median ratio to the plain loop (min..max)"
          f"{', each run between two plain runs' if args.bracketed else ''}")
    for loop_name, make_loop in loops:
        step = make_loop()
        for i in range(20):  # warm the loop itself up
            step(i)
        synchronize(args.device)
        if args.breakdown and args.device == "cuda":
            before = torch.cuda.memory_stats()["allocation.all.allocated"]
            for i in range(10):
                step(i)
            blocks = (torch.cuda.memory_stats()["allocation.all.allocated"] - before) / 10
            print(f"\n{loop_name}: {blocks:.0f} CUDA blocks allocated per step")
        all_modes = {name: make for name, make in modes(args.device, args.breakdown).items()
                     if name == "plain" or name in chosen}
        names = list(all_modes)
        boundaries = {name: [] if args.breakdown else None for name in names}

        def timed(name):
            return run(step, all_modes[name], args.steps, args.device, args.settle,
                       boundaries[name])

        plain, ratios = timed_rounds(names, timed, args.rounds, args.bracketed)
        print(f"\n{loop_name}: plain {statistics.median(t for t, _ in plain) / args.steps * 1e6:.0f} us/step")
        if args.settle:
            print(f"  {'':40s} all {args.steps} steps       steps {args.settle + 1}..{args.steps}")
        for name in names[1:]:
            line = f"  {name:40s} {summary([whole for whole, _ in ratios[name]])}"
            if args.settle:
                line += "   " + summary([settled for _, settled in ratios[name]])
            print(line)
        if args.breakdown:
            # Where the settled steps' time goes: the step boundaries' share of the plain step.
            counted = args.steps - args.settle
            plain_step = statistics.median(p for _, p in plain) / counted
            print(f"  step boundaries (watcher.step()), steps {args.settle + 1}..{args.steps}, "
                  f"median us/step and share of the plain step:")
            for name in names[1:]:
                per_step = statistics.median(boundaries[name]) / counted
                print(f"    {name:40s} {per_step * 1e6:8.1f} us  {per_step / plain_step:6.1%}")


def timed_rounds(names, timed, rounds, bracketed):
    """Runs every mode `rounds` times, `names[0]` being the plain loop, in a rotating order;
    `timed(name)` runs one and gives its (all steps, settled steps) seconds. Returns the plain runs'
    times and, for each other mode, its (all, settled) ratio to the plain loop per run: to the plain
    run of the same round, or with `bracketed` to the mean of the plain runs just before and after
    it."""
    others = names[1:]
    plain = []
    ratios = {name: [] for name in others}
    for round_index in range(rounds):
        if bracketed:
            shift = round_index % len(others)
            before = timed(names[0])
            plain.append(before)
            for name in others[shift:] + others[:shift]:
                mode = timed(name)
                after = timed(names[0])
                plain.append(after)
                ratios[name].append(tuple(m / ((b + a) / 2) for m, b, a in zip(mode, before, after)))
                before = after
        else:
            shift = round_index % len(names)
            times = {name: timed(name) for name in names[shift:] + names[:shift]}
            plain.append(times[names[0]])
            for name in others:
                ratios[name].append(tuple(m / p for m, p in zip(times[name], times[names[0]])))
    return plain, ratios


def summary(ratios):
    return f"{statistics.median(ratios):.2f}x  ({min(ratios):.2f}..{max(ratios):.2f})"


if __name__ == "__main__":
    main()
