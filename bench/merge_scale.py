"""`memseal merge` on jobs of many ranks: rank reports made from one real report (a rank of
examples/scripts/ddp_train.py under memseal run, or any memseal.check report given), each with its
rank, world size, and on one rank in eight a second, divergent finding at another line; the merge of
the folder is timed (wall, best of --repeat) with its peak resident memory, for several job sizes,
to show the cost grows linearly in ranks x findings.

    python bench/merge_scale.py --memseal build/release/memseal --report REPORT.json \
        [--ranks 256 1024 4096] [--repeat 3]
"""
import argparse
import copy
import json
import os
import resource
import subprocess
import tempfile
import time


def synthetic_job(report, ranks, folder):
    """rank-N.json for N < ranks, from `report` (which must have a finding)."""
    for rank in range(ranks):
        data = copy.deepcopy(report)
        data["rank"] = {"rank": rank, "local_rank": rank % 8, "world_size": ranks, "run_id": "bench"}
        if rank % 8 == 3:
            extra = copy.deepcopy(report["findings"][0])
            for frame in extra["frames"]:
                frame["line"] = frame["line"] + 1000  # another line: a cause of its own
            data["findings"].append(extra)
        with open(os.path.join(folder, f"rank-{rank}.json"), "w") as file:
            json.dump(data, file)


def measure(memseal, folder, repeat):
    best = None
    peak_kib = 0
    for _ in range(repeat):
        before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
        start = time.perf_counter()
        result = subprocess.run([memseal, "merge", folder, "--json", os.path.join(folder, "m.out")],
                                capture_output=True, text=True)
        elapsed = time.perf_counter() - start
        if result.returncode not in (0, 1):
            raise SystemExit(f"memseal merge failed: {result.stderr}")
        peak_kib = max(peak_kib, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, before)
        best = elapsed if best is None else min(best, elapsed)
    with open(os.path.join(folder, "m.out")) as file:
        merged = json.load(file)
    return best, peak_kib, merged


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--memseal", required=True)
    parser.add_argument("--report", required=True, help="a memseal.check report with a finding")
    parser.add_argument("--ranks", type=int, nargs="+", default=[256, 1024, 4096])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    with open(args.report) as file:
        report = json.load(file)
    if not report.get("findings"):
        raise SystemExit("--report needs a report with a finding")
    size = os.path.getsize(args.report)
    print(f"# one rank report of {size / 1024:.1f} KiB, {len(report['findings'])} finding(s); "
          f"best of {args.repeat}; peak RSS is the largest of any merge so far (ru_maxrss)")
    print("| ranks | files | merge wall (s) | per rank (ms) | peak RSS (MiB) | merged findings |")
    print("|---|---|---|---|---|---|")
    for ranks in args.ranks:
        with tempfile.TemporaryDirectory() as folder:
            synthetic_job(report, ranks, folder)
            wall, peak_kib, merged = measure(args.memseal, folder, args.repeat)
            print(f"| {ranks} | {size * ranks / 2**20:.0f} MiB | {wall:.2f} | "
                  f"{1000 * wall / ranks:.2f} | {peak_kib / 1024:.0f} | {len(merged['findings'])} |")


if __name__ == "__main__":
    main()
