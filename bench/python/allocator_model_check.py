"""memseal's model of the CUDA caching allocator against the allocator itself, on a GPU.

    <venv>/bin/python bench/python/allocator_model_check.py [--memseal PATH] [--out FOLDER]
                                                           [--workloads mlp,cnn,...]

Each workload runs in a process of its own under each allocator setting (the defaults,
expandable_segments:True, max_split_size_mb:128, roundup_power2_divisions:4), with
torch.cuda.memory._record_memory_history on from its start. The process records what the
allocator reserved at most (torch.cuda.max_memory_reserved()) and whether it ran out of memory,
and dumps its snapshot. `memseal whatif SNAPSHOT --json` then replays the snapshot under the
setting it ran with; its first row (the run's own settings) is compared with the process:

- reserved peak: the model's against max_memory_reserved(), relative difference;
- runs out: the model's answer against the process's.

The workloads: an MLP with Adam, a CNN, a transformer block over varying sequence lengths, a
workload that fragments the cache, and one that runs out of memory under a 2 GiB memory fraction
from fragmentation (under the defaults; expandable_segments and max_split_size_mb avoid it). Prints a table and writes results.json (and the snapshots) to --out; exits 1
when a reserved peak is off by more than 1% or an out-of-memory answer differs, 2 without a GPU.
"""

import argparse
import json
import os
import subprocess
import sys

SETTINGS = ["", "expandable_segments:True", "max_split_size_mb:128", "roundup_power2_divisions:4"]
WORKLOADS = ["mlp", "cnn", "transformer", "fragmenting", "oom"]
FRACTION_BYTES = 2 << 30  # the out-of-memory workload's cap
MiB = 1 << 20


def run_workload(name):
    """Runs in the child: the workload under the environment's allocator settings."""
    import torch

    torch.cuda.init()
    if name == "oom":
        total = torch.cuda.get_device_properties(0).total_memory
        torch.cuda.set_per_process_memory_fraction(FRACTION_BYTES / total)
    torch.cuda.memory._record_memory_history(max_entries=1_000_000)
    out_of_memory = False
    try:
        WORKLOAD_STEPS[name](torch)
        torch.cuda.synchronize()
    except torch.cuda.OutOfMemoryError:
        out_of_memory = True
    return {"reserved_peak": torch.cuda.max_memory_reserved(), "runs_out": out_of_memory,
            "snapshot": torch.cuda.memory._snapshot()}


def mlp(torch):
    model = torch.nn.Sequential(*[torch.nn.Linear(4096, 4096) for _ in range(4)]).cuda()
    optimizer = torch.optim.Adam(model.parameters())
    for _ in range(5):
        loss = model(torch.randn(512, 4096, device="cuda")).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


def cnn(torch):
    nn = torch.nn
    model = nn.Sequential(nn.Conv2d(3, 64, 7, stride=2, padding=3), nn.BatchNorm2d(64), nn.ReLU(),
                          nn.Conv2d(64, 128, 3, stride=2, padding=1), nn.ReLU(),
                          nn.Conv2d(128, 256, 3, stride=2, padding=1), nn.ReLU(),
                          nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(256, 1000)).cuda()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    for _ in range(4):
        loss = model(torch.randn(64, 3, 224, 224, device="cuda")).logsumexp(-1).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


def transformer(torch):
    block = torch.nn.TransformerEncoderLayer(d_model=1024, nhead=16, batch_first=True).cuda()
    optimizer = torch.optim.AdamW(block.parameters())
    for length in (128, 384, 256, 512, 200, 448):
        loss = block(torch.randn(16, length, 1024, device="cuda")).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


def fragmenting(torch):
    # Large blocks carved from segments, every other one freed, then requests a little larger
    # than the holes: the cache grows unless segments expand or large blocks are not split.
    kept = []
    for round_ in range(6):
        blocks = [torch.empty((24 + round_) * MiB, dtype=torch.uint8, device="cuda")
                  for _ in range(16)]
        kept.extend(blocks[1::2])
        del blocks
        kept.append(torch.empty((30 + 2 * round_) * MiB, dtype=torch.uint8, device="cuda"))
    return kept


def oom(torch):
    # Each round frees a 200 MiB block and carves a kept 120 MiB one from its segment: every
    # segment keeps an 80 MiB hole no later request fits, and under the 2 GiB cap the last
    # request finds no room under the defaults (a fragmentation out-of-memory), while expandable
    # segments, or max_split_size_mb keeping the 200 MiB segments whole, leave room for it.
    kept = []
    for _ in range(8):
        freed = torch.empty(200 * MiB, dtype=torch.uint8, device="cuda")
        del freed
        kept.append(torch.empty(120 * MiB, dtype=torch.uint8, device="cuda"))
    kept.append(torch.empty(500 * MiB, dtype=torch.uint8, device="cuda"))
    return kept


WORKLOAD_STEPS = {"mlp": mlp, "cnn": cnn, "transformer": transformer, "fragmenting": fragmenting,
                  "oom": oom}


def child(name, snapshot_path, result_path):
    import pickle

    measured = run_workload(name)
    with open(snapshot_path, "wb") as out:
        pickle.dump(measured.pop("snapshot"), out)
    with open(result_path, "w") as out:
        json.dump(measured, out)


def check(memseal, folder, name, setting):
    tag = f"{name}-{setting.replace(':', '_') or 'defaults'}"
    snapshot, result = os.path.join(folder, tag + ".pickle"), os.path.join(folder, tag + ".json")
    env = dict(os.environ, PYTORCH_CUDA_ALLOC_CONF=setting)
    env.pop("PYTORCH_ALLOC_CONF", None)
    subprocess.run([sys.executable, __file__, "--child", name, snapshot, result], env=env,
                   check=True, timeout=600)
    with open(result) as source:
        measured = json.load(source)
    flags = ["--json"] + (["--device-memory", str(FRACTION_BYTES)] if name == "oom" else [])
    replay = subprocess.run([memseal, "whatif", snapshot, *flags], capture_output=True, text=True,
                            timeout=600)
    if replay.returncode != 0:
        return {"workload": name, "setting": setting or "defaults", "error": replay.stderr.strip()}
    model = json.loads(replay.stdout)["settings"][0]
    difference = (model["reserved_peak"] - measured["reserved_peak"]) / max(
        measured["reserved_peak"], 1)
    return {"workload": name, "setting": setting or "defaults",
            "measured_reserved_peak": measured["reserved_peak"],
            "model_reserved_peak": model["reserved_peak"], "relative_difference": difference,
            "measured_runs_out": measured["runs_out"], "model_runs_out": model["runs_out"]}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--memseal", default="build/release/memseal")
    parser.add_argument("--out", default="/tmp/memseal-allocator-model")
    parser.add_argument("--workloads", default=",".join(WORKLOADS))
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(*args.child)
        return 0
    import torch

    if not torch.cuda.is_available():
        print("allocator_model_check: no CUDA device", file=sys.stderr)
        return 2
    os.makedirs(args.out, exist_ok=True)
    rows, failed = [], False
    print(f"{'workload':<12} {'setting':<28} {'measured':>12} {'model':>12} {'diff':>8}  runs out")
    for name in args.workloads.split(","):
        for setting in SETTINGS:
            row = check(args.memseal, args.out, name, setting)
            rows.append(row)
            if "error" in row:
                failed = True
                print(f"{name:<12} {row['setting']:<28} whatif failed: {row['error']}")
                continue
            agrees = row["measured_runs_out"] == row["model_runs_out"]
            failed |= abs(row["relative_difference"]) > 0.01 or not agrees
            print(f"{name:<12} {row['setting']:<28} {row['measured_reserved_peak'] / MiB:>10.1f}Mi"
                  f" {row['model_reserved_peak'] / MiB:>10.1f}Mi {100 * row['relative_difference']:>7.2f}%"
                  f"  {row['measured_runs_out']}/{row['model_runs_out']}")
    with open(os.path.join(args.out, "results.json"), "w") as out:
        json.dump({"device": torch.cuda.get_device_name(0), "torch": torch.__version__,
                   "rows": rows}, out, indent=2)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
