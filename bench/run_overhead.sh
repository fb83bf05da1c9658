#!/usr/bin/env bash
# The example server's request loop plain, under `memseal run` (stacks sampled 1 in 64; the
# default, every stack; and the lean set: 100 ms windows, ops not watched, stacks sampled) and under
# heaptrack, interleaved in one run: REPEATS rounds of the five, the request loop's own wall time
# (the server measures it, start-up excluded). Prints each round and the median ratios to plain.
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
declare -A times
modes=(plain run-sampled run-default run-lean heaptrack)
if [ "$bracketed" = 1 ]; then
  modes=(plain run-sampled plain run-default plain run-lean plain heaptrack plain)
fi
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
python3 - "$bracketed" "${times[plain]}" "${times[run-sampled]}" "${times[run-default]}" \
  "${times[run-lean]}" "${times[heaptrack]}" <<'PY'
import statistics, sys
bracketed = sys.argv[1] == "1"
plain, sampled, default, lean, heaptrack = ([float(x) for x in arg.split()] for arg in sys.argv[2:])
# Bracketed: each round has five plain runs, the k-th mode's run between plain runs k and k+1.
per_round = 5 if bracketed else 1
for k, (name, values) in enumerate((("memseal run --stacks sample:64", sampled),
                                    ("memseal run (stacks on)", default),
                                    ("memseal run lean (windows, no ops)", lean),
                                    ("heaptrack", heaptrack))):
    if bracketed:
        ratios = [v / ((plain[r * per_round + k] + plain[r * per_round + k + 1]) / 2)
                  for r, v in enumerate(values)]
    else:
        ratios = [v / p for v, p in zip(values, plain)]
    print(f"{name:32s} median {statistics.median(ratios):.2f}x  (rounds: {', '.join(f'{r:.2f}' for r in ratios)})")
print(f"plain request loop median {statistics.median(plain):.0f} ms")
PY
