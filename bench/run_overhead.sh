#!/usr/bin/env bash
# The example server's request loop plain, under `memseal run` (stacks sampled 1 in 64; the
# default, every stack; and the lean set: 100 ms windows, ops not watched, stacks sampled) and under
# heaptrack, interleaved in one run: REPEATS rounds of the five, the request loop's own wall time
# (the server measures it, start-up excluded). Prints each round and, for each of the four, three
# ratios to plain: the whole loop's (median of the rounds); the steady state's, from the fastest of
# the 20 blocks of REQUESTS/40 requests in the loop's second half (median of the rounds); and the
# whole loop put together from each block's fastest round. The last two hold on a machine whose
# other work slows some rounds by half: that noise only adds time, so the fastest stretches
# compare the two loops' own costs.
# With --bracketed a plain run follows each of the four others as well, and a mode's ratio is to
# the mean of the plain runs just before and after it (a machine whose speed wanders within a
# round then compares runs seconds apart).
#   bench/run_overhead.sh [BUILD_DIR] [REPEATS] [REQUESTS] [--bracketed]
set -euo pipefail
build=${1:-build/release}
repeats=${2:-5}
requests=${3:-20000}
bracketed=0
case "${4:-}" in
  "") ;;
  --bracketed) bracketed=1 ;;
  *) echo "run_overhead: unknown option '$4' (--bracketed)" >&2; exit 2 ;;
esac
server="$build/examples/inference_server"
memseal="$build/memseal"
command -v heaptrack > /dev/null || { echo "run_overhead: heaptrack not found (apt install heaptrack)" >&2; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
loop_ms() { sed -n 's/^request loop: [0-9]* requests in \([0-9.]*\) ms$/\1/p' "$1" | tail -1; }
modes=(plain run-sampled run-default run-lean heaptrack)
if [ "$bracketed" = 1 ]; then
  modes=(plain run-sampled plain run-default plain run-lean plain heaptrack plain)
fi
block=$(( requests / 40 > 0 ? requests / 40 : 1 ))
mkdir "$work/runs"
run=0
for round in $(seq "$repeats"); do
  for mode in "${modes[@]}"; do
    args=(--requests "$requests" --timing 1 --timing-blocks "$block")
    run=$((run + 1))
    err="$work/runs/$(printf %04d "$run")-$mode.err"
    case $mode in
      plain) "$server" "${args[@]}" > /dev/null 2> "$err" ;;
      run-sampled) "$memseal" run --stacks sample:64 -- "$server" "${args[@]}" > /dev/null 2> "$err" ;;
      run-default) "$memseal" run -- "$server" "${args[@]}" > /dev/null 2> "$err" ;;
      run-lean) "$memseal" run --interval 100ms --observe-ops off --stacks sample:64 -- \
                  "$server" "${args[@]}" > /dev/null 2> "$err" ;;
      heaptrack) heaptrack -o "$work/heaptrack" "$server" "${args[@]}" > "$work/out" 2> "$err"
                 cat "$work/out" >> "$err" ;;
    esac
    ms=$(loop_ms "$err")
    [ -n "$ms" ] || { echo "run_overhead: round $round $mode printed no loop time:" >&2; tail -5 "$err" >&2; exit 1; }
    echo "round $round $mode ${ms} ms"
  done
done
python3 - "$bracketed" "$work/runs" <<'PY'
import os, re, statistics, sys
bracketed, folder = sys.argv[1] == "1", sys.argv[2]
runs = {}  # mode -> [(loop ms, [block ms, ...]), ...] in the order they ran
for name in sorted(os.listdir(folder)):
    text = open(os.path.join(folder, name)).read()
    loop = float(re.findall(r"^request loop: \d+ requests in ([\d.]+) ms$", text, re.M)[-1])
    blocks = [float(x) for x in re.findall(r"^request block: \d+ requests in ([\d.]+) ms$", text, re.M)]
    runs.setdefault(name[5:-4], []).append((loop, blocks))
plain = runs["plain"]
# Bracketed: each round has five plain runs, the k-th mode's run between plain runs k and k+1.
per_round = 5 if bracketed else 1

def steady(blocks):
    # The fastest block of the loop's second half: past the loop finder's learning, and the
    # stretch of the run that the machine's other work disturbed least.
    return min(blocks[len(blocks) // 2:])

def assembled(mode_runs):
    # The loop put together from each block at its fastest over the rounds: noise only adds time.
    return sum(min(run[1][i] for run in mode_runs) for i in range(len(mode_runs[0][1])))

for k, (mode, name) in enumerate((("run-sampled", "memseal run --stacks sample:64"),
                                  ("run-default", "memseal run (stacks on)"),
                                  ("run-lean", "memseal run lean (windows, no ops)"),
                                  ("heaptrack", "heaptrack"))):
    def ratios(measure):
        values = [measure(run) for run in runs[mode]]
        if bracketed:
            return [v / ((measure(plain[r * per_round + k]) + measure(plain[r * per_round + k + 1])) / 2)
                    for r, v in enumerate(values)]
        return [v / measure(p) for v, p in zip(values, plain)]
    loop = ratios(lambda run: run[0])
    fastest = ratios(lambda run: steady(run[1]))
    print(f"{name:34s} whole loop median {statistics.median(loop):.2f}x  (rounds: {', '.join(f'{r:.2f}' for r in loop)})")
    print(f"{'':34s} steady, fastest block median {statistics.median(fastest):.3f}x  (rounds: {', '.join(f'{r:.2f}' for r in fastest)})")
    print(f"{'':34s} whole loop, each block at its fastest {assembled(runs[mode]) / assembled(plain):.3f}x")
print(f"plain request loop median {statistics.median(run[0] for run in plain):.0f} ms, "
      f"{len(plain[0][1])} blocks a run")
PY
