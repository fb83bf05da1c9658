#!/usr/bin/env bash
# The example server's request loop plain, under `memseal run` (stacks sampled 1 in 64; the
# default, every stack; and the lean set: 100 ms windows, ops not watched, stacks sampled) and under
# heaptrack, interleaved in one run: REPEATS rounds of the five, the request loop's own wall time
# (the server measures it, start-up excluded). Prints each round and the median ratios to plain.
#   bench/run_overhead.sh [BUILD_DIR] [REPEATS] [REQUESTS]
set -euo pipefail
build=${1:-build/release}
repeats=${2:-5}
requests=${3:-20000}
server="$build/examples/inference_server"
memseal="$build/memseal"
command -v heaptrack > /dev/null || { echo "run_overhead: heaptrack not found (apt install heaptrack)" >&2; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
loop_ms() { sed -n 's/^request loop: [0-9]* requests in \([0-9.]*\) ms$/\1/p' "$1" | tail -1; }
declare -A times
modes=(plain run-sampled run-default run-lean heaptrack)
for round in $(seq "$repeats"); do
  for mode in "${modes[@]}"; do
    args=(--requests "$requests" --timing 1)
    case $mode in
      plain) "$server" "${args[@]}" > /dev/null 2> "$work/err" ;;
      run-sampled) "$memseal" run --stacks sample:64 -- "$server" "${args[@]}" > /dev/null 2> "$work/err" ;;
      run-default) "$memseal" run -- "$server" "${args[@]}" > /dev/null 2> "$work/err" ;;
      run-lean) "$memseal" run --interval 100ms --observe-ops off --stacks sample:64 -- \
                  "$server" "${args[@]}" > /dev/null 2> "$work/err" ;;
      heaptrack) heaptrack -o "$work/heaptrack" "$server" "${args[@]}" > "$work/out" 2> "$work/err"
                 cat "$work/out" >> "$work/err" ;;
    esac
    ms=$(loop_ms "$work/err")
    times[$mode]+="$ms "
    echo "round $round $mode ${ms} ms"
  done
done
python3 - "${times[plain]}" "${times[run-sampled]}" "${times[run-default]}" "${times[run-lean]}" \
  "${times[heaptrack]}" <<'PY'
import statistics, sys
plain, sampled, default, lean, heaptrack = ([float(x) for x in arg.split()] for arg in sys.argv[1:])
for name, values in (("memseal run --stacks sample:64", sampled), ("memseal run (stacks on)", default),
                     ("memseal run lean (windows, no ops)", lean), ("heaptrack", heaptrack)):
    ratios = [v / p for v, p in zip(values, plain)]
    print(f"{name:32s} median {statistics.median(ratios):.2f}x  (rounds: {', '.join(f'{r:.2f}' for r in ratios)})")
print(f"plain request loop median {statistics.median(plain):.0f} ms")
PY
