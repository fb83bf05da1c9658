"""memseal's own memory over a long run: the same Python loop run plain, under memseal.watch and
unmodified under `memseal run`, each in a fresh process, sampling the process's resident memory as it goes. The loop is built to
make a tracker's tables grow if anything in them is kept per allocation, per shape, per thread or
per stack: every step allocates and frees tensors of a shape it has not used for a while (tens of
thousands of shapes), a thread that allocates comes and goes every 1,000 steps, and a function
compiled anew every 5,000 steps gives allocations a Python line never seen before.

    <venv>/bin/python bench/python/soak.py [--steps 1000000] [--samples 20]

Prints each mode's resident memory at intervals and its growth over the second half of the run;
memseal's own growth is each mode's minus the plain loop's. Exits 1 when that exceeds --cap-mib
(8 MiB by default): memseal's memory must not grow with the length of a run.
"""
import argparse
import json
import subprocess
import sys

CHILD = r'''
import json, sys, threading, time
import torch
import memseal

steps, samples, mode = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
torch.set_num_threads(1)

def resident_bytes():
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * 4096

def in_a_thread(n):
    torch.ones(n + 1).sum()

functions = {}
watch = memseal.Watch(5, on_leak="none", find_holders=False) if mode == "watch" else None
if watch:
    watch.start()
curve = []
started = time.perf_counter()
step_function = lambda t: t * 2
for i in range(steps):
    rows, columns = 1 + i % 997, 1 + (i // 997) % 61
    step_function(torch.ones(rows, columns)).sum()
    if i % 1000 == 999:
        thread = threading.Thread(target=in_a_thread, args=(i % 50,))
        thread.start()
        thread.join()
    if i % 5000 == 4999:  # a new code object: a Python line no earlier step had
        namespace = {}
        exec(compile(f"def step_function(t):\n    return t * 2  # {i}\n", f"<generated {i}>", "exec"),
             namespace)
        step_function = namespace["step_function"]
    if watch:
        watch.step()
    if i % max(1, steps // samples) == 0 or i == steps - 1:
        curve.append((i + 1, resident_bytes()))
elapsed = time.perf_counter() - started
verdict = None
if watch:
    watch.finish()
    verdict = "leak" if watch.report().leak else "no leak"
print(json.dumps({"mode": mode, "curve": curve, "seconds": elapsed, "verdict": verdict}))
'''


def run(mode, steps, samples):
    program = [sys.executable, "-c", CHILD, str(steps), str(samples), mode]
    if mode == "memseal run":  # the plain loop, unmodified, under the launcher
        program = [sys.executable, "-m", "memseal", "run", "--", *program[:-1], "plain"]
    result = subprocess.run(program, capture_output=True, text=True, check=True)
    run = json.loads(result.stdout.strip().splitlines()[-1])
    if mode == "memseal run":
        run["verdict"] = "leak" if "LEAK" in result.stderr else "no leak"
    return run


def growth_of_second_half(curve):
    half = curve[-1][0] / 2
    start = min(curve, key=lambda point: abs(point[0] - half))
    return curve[-1][1] - start[1]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=1000000)
    parser.add_argument("--samples", type=int, default=20)
    parser.add_argument("--cap-mib", type=float, default=8.0)
    args = parser.parse_args()
    if args.steps < 10 or args.samples < 2:
        parser.error("--steps must be at least 10 and --samples at least 2")
    runs = {mode: run(mode, args.steps, args.samples)
            for mode in ("plain", "watch", "memseal run")}
    mib = 1 << 20
    print(f"# {args.steps} steps, resident memory (MiB) at step:")
    print("step      " + "  ".join(f"{mode:>11s}" for mode in runs))
    for index, (step, _) in enumerate(runs["plain"]["curve"]):
        values = [runs[mode]["curve"][index][1] / mib for mode in runs]
        print(f"{step:<9d} " + "  ".join(f"{value:11.1f}" for value in values))
    for mode, result in runs.items():
        print(f"{mode}: {result['seconds']:.0f} s, second half's growth "
              f"{growth_of_second_half(result['curve']) / mib:+.2f} MiB"
              + (f", verdict {result['verdict']}" if result["verdict"] else ""))
    plain = growth_of_second_half(runs["plain"]["curve"])
    worst = 0.0
    for mode in ("watch", "memseal run"):
        own = (growth_of_second_half(runs[mode]["curve"]) - plain) / mib
        worst = max(worst, own)
        print(f"memseal's own growth over the second half, {mode}: {own:+.2f} MiB "
              f"(cap {args.cap_mib} MiB)")
    return 0 if worst <= args.cap_mib else 1

if __name__ == "__main__":
    sys.exit(main())
