"""Ratios to plain runs of a loop timed by the benchmarked program itself, for
bench/run_overhead.sh and bench/run_overhead_python.sh.

    python3 bench/block_ratios.py FOLDER [--bracketed] MODE=NAME [MODE=NAME ...]

FOLDER holds one file per run, NNNN-MODE.err in the order they ran (MODE `plain` for the runs
without a tool), each with the program's "<what> loop: N <units> in MS ms" line and its
"<what> block: N <units> in MS ms" lines, one per block of the loop. Rounds are one plain run and
one run of each MODE; with --bracketed a plain run comes before and after each MODE's run, and
the MODE's ratio is to the mean of those two.

For each MODE, three ratios: the whole loop's (the median of the rounds); the steady state's,
from the fastest block of the loop's second half (median of the rounds); and the whole loop put
together from each block's fastest round. The last two hold on a shared machine whose other work
slows some runs by a third or more: that noise only ever adds time, so the fastest stretches
compare what the loops themselves cost."""
import os
import re
import statistics
import sys

LOOP = re.compile(r"^\w+ loop: \d+ \w+ in ([\d.]+) ms$", re.M)
BLOCK = re.compile(r"^\w+ block: \d+ \w+ in ([\d.]+) ms$", re.M)


def read_runs(folder):
    """mode -> [(loop ms, [block ms, ...]), ...] in the order they ran."""
    runs = {}
    for name in sorted(os.listdir(folder)):
        text = open(os.path.join(folder, name)).read()
        loops = LOOP.findall(text)
        blocks = [float(x) for x in BLOCK.findall(text)]
        if not loops or not blocks:
            sys.exit(f"block_ratios: {name} has no loop time or no block times")
        runs.setdefault(name[5:-4], []).append((float(loops[-1]), blocks))
    return runs


def listed(values):
    return ", ".join(f"{value:.2f}" for value in values)


def steady(blocks):
    # The fastest block of the loop's second half: past a tool's start (learning the loop,
    # watching its first steps), and the stretch of the run the machine disturbed least.
    return min(blocks[len(blocks) // 2:])


def assembled(mode_runs):
    # The loop put together from each block at its fastest over the rounds.
    return sum(min(run[1][i] for run in mode_runs) for i in range(len(mode_runs[0][1])))


def main():
    args = sys.argv[1:]
    if not args:
        sys.exit(__doc__)
    folder, bracketed = args[0], "--bracketed" in args[1:]
    modes = [arg.split("=", 1) for arg in args[1:] if arg != "--bracketed"]
    if not modes or any(len(mode) != 2 for mode in modes):
        sys.exit("block_ratios: give each mode as MODE=NAME")
    runs = read_runs(folder)
    plain = runs.get("plain")
    if not plain:
        sys.exit("block_ratios: no plain run")
    if len({len(run[1]) for mode_runs in runs.values() for run in mode_runs}) != 1:
        sys.exit("block_ratios: the runs do not all have the same number of blocks")
    per_round = len(modes) + 1 if bracketed else 1
    for k, (mode, name) in enumerate(modes):
        if mode not in runs:
            sys.exit(f"block_ratios: no run of {mode}")

        def ratios(measure):
            values = [measure(run) for run in runs[mode]]
            if bracketed:
                return [v / ((measure(plain[r * per_round + k]) +
                              measure(plain[r * per_round + k + 1])) / 2)
                        for r, v in enumerate(values)]
            return [v / measure(p) for v, p in zip(values, plain)]

        loop = ratios(lambda run: run[0])
        fastest = ratios(lambda run: steady(run[1]))
        print(f"{name:34s} whole loop median {statistics.median(loop):.2f}x  (rounds: {listed(loop)})")
        print(f"{'':34s} steady, fastest block median {statistics.median(fastest):.3f}x  "
              f"(rounds: {listed(fastest)})")
        print(f"{'':34s} whole loop, each block at its fastest "
              f"{assembled(runs[mode]) / assembled(plain):.3f}x")
    print(f"plain loop median {statistics.median(run[0] for run in plain):.0f} ms, "
          f"{len(plain[0][1])} blocks a run")


if __name__ == "__main__":
    main()
