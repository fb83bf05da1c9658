#!/usr/bin/env bash
# The example server's request loop plain, under `memseal run` (stacks sampled 1 in 64; the
# default, every stack; and the lean set: 100 ms windows, ops not watched, stacks sampled) and under
# heaptrack, interleaved in one run: REPEATS rounds of the five, the request loop's own wall time
# (the server measures it, start-up excluded), in 40 blocks. Prints each round and, for each of the
# four, three ratios to plain (bench/block_ratios.py): the whole loop's, the fastest block's of the
# loop's second half, and the loop's put together from each block's fastest round.
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
      run-lean) "$memseal" run --interval 100ms --watch-ops off --stacks sample:64 -- \
                  "$server" "${args[@]}" > /dev/null 2> "$err" ;;
      heaptrack) heaptrack -o "$work/heaptrack" "$server" "${args[@]}" > "$work/out" 2> "$err"
                 cat "$work/out" >> "$err" ;;
    esac
    ms=$(loop_ms "$err")
    [ -n "$ms" ] || { echo "run_overhead: round $round $mode printed no loop time:" >&2; tail -5 "$err" >&2; exit 1; }
    echo "round $round $mode ${ms} ms"
  done
done
flags=()
[ "$bracketed" = 1 ] && flags=(--bracketed)
python3 "$(dirname "${BASH_SOURCE[0]}")/block_ratios.py" "$work/runs" "${flags[@]}" \
  "run-sampled=memseal run --stacks sample:64" "run-default=memseal run (stacks on)" \
  "run-lean=memseal run lean (windows, no ops)" "heaptrack=heaptrack"
