"""`memseal diff` of two long run reports: a real memseal.check report (of `memseal run`, `check`
or `watch`) stretched to --steps step boundaries (per_step, as a run of that many steps writes
it), the second with its findings' rates doubled and one finding at another line; the diff is
timed (wall, best of --repeat) with its peak resident memory, beside the reports' size.

    python bench/diff_scale.py --memseal build/release/memseal --report REPORT.json \\
        [--steps 10000] [--repeat 5]
"""
import argparse
import copy
import json
import os
import resource
import subprocess
import tempfile
import time


def stretched(report, steps, growth):
    data = copy.deepcopy(report)
    template = data["per_step"][-1] if data["per_step"] else {
        "live_bytes": 0, "live_count": 0, "resident_bytes": 0, "graph_nodes_alive": 0}
    data["per_step"] = []
    for step in range(steps):
        sample = dict(template, step=step)
        sample["live_bytes"] = template["live_bytes"] + growth * step
        data["per_step"].append(sample)
    data["steps"] = steps
    return data


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--memseal", required=True)
    parser.add_argument("--report", required=True, help="a memseal.check report with a finding")
    parser.add_argument("--steps", type=int, default=10000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    with open(args.report) as file:
        report = json.load(file)
    before = stretched(report, args.steps, 64)
    after = stretched(report, args.steps, 128)
    for finding in after["findings"]:
        finding["bytes_per_step"] *= 2
    if after["findings"]:
        extra = copy.deepcopy(after["findings"][0])
        for frame in extra.get("frames", []):
            frame["line"] += 1000  # another line: a new cause
        after["findings"].append(extra)
    with tempfile.TemporaryDirectory() as folder:
        paths = []
        for name, data in (("before.json", before), ("after.json", after)):
            paths.append(os.path.join(folder, name))
            with open(paths[-1], "w") as file:
                json.dump(data, file)
        sizes = [os.path.getsize(path) for path in paths]
        times = []
        for _ in range(args.repeat):
            start = time.perf_counter()
            done = subprocess.run([args.memseal, "diff", *paths, "--json",
                                   os.path.join(folder, "diff.json")], capture_output=True)
            times.append(time.perf_counter() - start)
            if done.returncode not in (0, 1):
                raise SystemExit(f"memseal diff failed ({done.returncode}): {done.stderr.decode()}")
        peak_kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    print(f"command: python bench/diff_scale.py --memseal {args.memseal} --report {args.report} "
          f"--steps {args.steps} --repeat {args.repeat}")
    print(f"{args.steps} steps per report, {sizes[0] / 2**20:.1f} and {sizes[1] / 2**20:.1f} MiB of "
          f"JSON: diff best {min(times) * 1000:.0f} ms, median {sorted(times)[len(times) // 2] * 1000:.0f} "
          f"ms, peak resident {peak_kib / 1024:.1f} MiB")


if __name__ == "__main__":
    main()
