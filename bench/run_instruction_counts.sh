#!/usr/bin/env bash
# `memseal run` with its defaults on the example server's request loop, in instructions, which the
# machine's noise does not move: callgrind counts the request loop alone (collection toggled on the
# server's serve lambda, start-up and the report at exit left out), plain and under `memseal run`,
# at REQUESTS and at three times as many; the difference over the 2 x REQUESTS between is the
# steady cost, past the loop finder's learning and the watched steps before counting. Prints Ir
# per request of both and their ratio.
#
# Under valgrind the server runs some 300 times slower, and `memseal run` sizes its steps by time:
# MEMSEAL_RUN_TIME_SCALE=SCALE stretches its clock-based limits so that its steps come as many
# iterations apart as in a native run. The script prints the iterations per step of a native run
# and of the counted ones (from the report's steps: lines): compare them before reading the ratio.
# valgrind runs no AVX-512 code, so libtorch's matrix products take their AVX2 path there: the
# plain count is not the native mix of instructions, and the wall-time ratio (bench/run_overhead.sh)
# stays the figure to compare with heaptrack.
#   bench/run_instruction_counts.sh [BUILD_DIR] [REQUESTS] [SCALE]
set -euo pipefail
build=${1:-build/release}
requests=${2:-2000}
scale=${3:-300}
[[ "$requests" =~ ^[1-9][0-9]*$ ]] || { echo "run_instruction_counts: REQUESTS must be a positive integer, not '$requests'" >&2; exit 2; }
[[ "$scale" =~ ^[1-9][0-9]*$ ]] && [ "$scale" -le 1000 ] || { echo "run_instruction_counts: SCALE must be an integer from 1 to 1000, not '$scale'" >&2; exit 2; }
server="$build/examples/inference_server"
memseal="$build/memseal"
command -v valgrind > /dev/null || { echo "run_instruction_counts: valgrind not found (apt install valgrind)" >&2; exit 2; }
[ -x "$server" ] && [ -x "$memseal" ] || { echo "run_instruction_counts: no $server or $memseal (build first)" >&2; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export OMP_NUM_THREADS=1
loop='--toggle-collect=main::{lambda()#1}::operator()() const'
"$memseal" run -- "$server" --requests "$((3 * requests))" > /dev/null 2> "$work/native.err"
# Plain and under memseal run side by side, one a core.
for size in small large; do
  n=$requests
  [ "$size" = large ] && n=$((3 * requests))
  valgrind --tool=callgrind "$loop" --callgrind-out-file="$work/plain-$size.out" \
    "$server" --requests "$n" > /dev/null 2> "$work/plain-$size.err" &
  plain_pid=$!
  MEMSEAL_RUN_TIME_SCALE="$scale" "$memseal" run -- valgrind --tool=callgrind "$loop" \
    --callgrind-out-file="$work/run-$size.out" "$server" --requests "$n" \
    > /dev/null 2> "$work/run-$size.err"
  wait "$plain_pid"
done
python3 - "$requests" "$work" <<'PY'
import re, sys
requests, work = int(sys.argv[1]), sys.argv[2]

def total(name):
    for line in open(f"{work}/{name}.out"):
        if line.startswith("summary:"):
            return int(line.split()[1])
    sys.exit(f"run_instruction_counts: no count in {name}.out")

def steps(name):
    text = " ".join(open(f"{work}/{name}.err").read().split())
    match = re.search(r"(\d+) steps? in 1 run \((\d+) iterations", text)
    counted = re.search(r"(\d+) of these steps were ended by counting", text)
    if not match:
        return "no loop found"
    steps_, iterations = int(match.group(1)), int(match.group(2))
    return (f"{iterations / steps_:.2f} iterations a step, {steps_} steps, "
            f"{counted.group(1) if counted else 0} counted")

print(f"native memseal run, {3 * requests} requests: {steps('native')}")
for size in ("small", "large"):
    print(f"counted memseal run, {'3 x ' if size == 'large' else ''}{requests} requests: "
          f"{steps('run-' + size)}")
between = 2 * requests
plain = (total("plain-large") - total("plain-small")) / between
run = (total("run-large") - total("run-small")) / between
print(f"plain                {plain:12,.0f} Ir/request (requests {requests + 1}..{3 * requests})")
print(f"memseal run          {run:12,.0f} Ir/request  {run / plain:.3f}x")
print(f"whole loop of {requests}: plain {total('plain-small') / requests:,.0f}, memseal run "
      f"{total('run-small') / requests:,.0f} Ir/request "
      f"({total('run-small') / total('plain-small'):.3f}x, learning included)")
PY
