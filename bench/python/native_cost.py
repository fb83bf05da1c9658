#!/usr/bin/env python3
"""What a retained tensor or autograd node costs in resident memory beyond its tensor storage, on
this libtorch: the figures behind the leak detector's estimates (src/detect/evidence.cpp), which
count that memory as explained by a tensor or graph leak rather than as a leak of its own. Each
case runs in a fresh process (freed memory of an earlier case would be reused) without memseal.

    ~/.cache/memseal/venv-torch-2.11.0/bin/python bench/python/native_cost.py
"""
import subprocess
import sys

CASES = {
    "tensor-4B": "1-element tensors kept in a list: bytes per tensor beyond its storage",
    "tensor-4KiB": "4 KiB tensors kept in a list: bytes per tensor beyond its storage",
    "tensor-512KiB": "512 KiB tensors kept in a list: bytes per tensor beyond its storage",
    "graph-chain": "a chain of sin() kept through its last output: bytes per node (1 saved 4 B tensor)",
    "graph-mlp": "small mm/relu/sum graphs kept: bytes per node beyond saved storage",
    "hook-inputs": "a forward pre-hook keeping each layer's 4 KiB input, outputs coming and going: "
                   "resident bytes per kept byte",
}


def measure(case):
    import torch

    def rss():
        with open("/proc/self/statm") as file:
            return int(file.read().split()[1]) * 4096

    torch.set_num_threads(1)
    warm = [torch.randn(16) for _ in range(1000)]  # the allocator's first arenas
    keep = []
    if case.startswith("tensor-"):
        elements = {"tensor-4B": 1, "tensor-4KiB": 1024, "tensor-512KiB": 128 * 1024}[case]
        count = 200000 if elements == 1 else 2000
        base = rss()
        for _ in range(count):
            keep.append(torch.randn(elements))
        return (rss() - base) / count - elements * 4
    if case == "graph-chain":
        count = 200000
        y = torch.randn(1, requires_grad=True)
        base = rss()
        for _ in range(count):
            y = torch.sin(y)
        return (rss() - base) / count - 4  # the saved input's storage
    if case == "graph-mlp":
        weight = torch.randn(16, 16, requires_grad=True)
        graphs = 20000
        base = rss()
        for _ in range(graphs):
            keep.append((torch.randn(4, 16) @ weight).relu().sum())
        # 3 nodes per graph; saved: the input (256 B) and the relu output (256 B)
        return ((rss() - base) / graphs - 512) / 3
    if case == "hook-inputs":
        model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 64),
                                    torch.nn.ReLU(), torch.nn.Linear(64, 8))
        captured = {}

        def capture(module, inputs):
            captured.setdefault(id(module), []).append(inputs[0].detach())

        for layer in model:
            if isinstance(layer, torch.nn.Linear):
                layer.register_forward_pre_hook(capture)
        for _ in range(200):
            with torch.no_grad():
                model(torch.randn(16, 64))
        base = rss()
        steps = 2000
        for _ in range(steps):
            with torch.no_grad():
                model(torch.randn(16, 64))
        return (rss() - base) / (steps * 3 * 16 * 64 * 4)
    raise SystemExit(f"unknown case {case}")


def main():
    if len(sys.argv) == 2:
        print(measure(sys.argv[1]))
        return 0
    print("| case | measured |")
    print("|---|---:|")
    for case, what in CASES.items():
        out = subprocess.run([sys.executable, __file__, case], capture_output=True, text=True,
                             check=True).stdout.strip()
        value = float(out)
        shown = f"{value:.2f}" if case == "hook-inputs" else f"{value:.0f} B"
        print(f"| {what} | {shown} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
